-- Leaky bucket settle (takeRecord, settle.lua, gives d and at): drain -d
-- events' worth, or add d more, beyond the capacity if need be (up to one
-- capacity beyond), so that later requests wait until it has drained.
-- Mirrors leakyBucketAlg.settle.
--
-- KEYS[1]  as in decide.lua; KEYS[#KEYS] the record (settle.lua)
-- ARGV     now (µs or ""), actual, capacity, every (µs), "r", then the previous policies
--@uses store
local at, d = takeRecord()
if not at then
  return d
end
local key = KEYS[1]
local capacity = tonumber(ARGV[3])
local every = tonumber(ARGV[4])
local span = capacity * every
if inherit then
  inherit(now, 6, capacity, 'r', function(u) lbCharged(key, now, u, every) end)
end
local empty = lbLoad(load(key), now, span)
if d < 0 then
  empty = empty - math.min(-d, capacity) * every
else
  -- At most one capacity beyond full (more only if waiters hold it).
  local level = math.max(empty - now, 0)
  empty = now + math.max(level, math.min(level + math.min(d, 2 * capacity) * every, 2 * span))
end
if empty <= now then
  redis.call('DEL', key) -- empty: as fresh
else
  redis.call('SET', key, lbState(empty, now, span), 'PX', ttl(empty - now))
end
return 1
