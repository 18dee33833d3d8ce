-- Leaky bucket refund: lower the level by n events. Mirrors
-- leakyBucketAlg.refund.
--
-- KEYS[1]  as in leakybucket.lua
-- ARGV     now (µs or ""), n, capacity, every (µs)
local key = KEYS[1]
local now = clock()
local every = tonumber(ARGV[4])
local empty = lbLoad(key, now, tonumber(ARGV[3]) * every)
if empty <= now then
  return 0
end
empty = empty - tonumber(ARGV[2]) * every
if empty <= now then
  redis.call('DEL', key)
else
  redis.call('SET', key, int(empty), 'PX', ttl(empty - now))
end
return 1
