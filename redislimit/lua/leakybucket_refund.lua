-- Leaky bucket refund: lower the level by n events. Mirrors
-- leakyBucketAlg.refund.
--
-- KEYS[1]  as in leakybucket.lua
-- ARGV     now (µs or ""), n, capacity, every (µs), "r", then the previous policies
local key = KEYS[1]
local now = clock()
local n = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local every = tonumber(ARGV[4])
inherit(now, 6, capacity, 'r', function(u) lbCharged(key, now, u, every) end)
local empty = lbLoad(key, now, capacity * every)
if empty <= now then
  return 0
end
empty = empty - n * every
if empty <= now then
  redis.call('DEL', key)
else
  redis.call('SET', key, int(empty), 'PX', ttl(empty - now))
end
return 1
