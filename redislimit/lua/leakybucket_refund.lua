-- Leaky bucket refund: lower the level by n events. Mirrors
-- leakyBucketAlg.refund.
--
-- KEYS[1]  as in leakybucket.lua
-- ARGV     now (µs or ""), n, capacity, every (µs)
local key = KEYS[1]
local empty = tonumber(redis.call('GET', key))
if not empty then
  return 0
end
local now = clock()
empty = empty - tonumber(ARGV[2]) * tonumber(ARGV[4])
if empty <= now then
  redis.call('DEL', key)
else
  redis.call('SET', key, empty, 'PX', ttl(empty - now))
end
return 1
