-- Token bucket settle (takeRecord, settle.lua, gives d and at): refill up
-- to now, then give back -d tokens (never above a full bucket) or charge
-- d more, into debt beyond an empty bucket (down to one capacity below
-- empty), so that later requests wait the overrun out. Mirrors
-- tokenBucketAlg.settle.
--
-- KEYS[1]  as in decide.lua; KEYS[#KEYS] the record (settle.lua)
-- ARGV     now (µs or ""), actual, capacity, r, p, "r", then the previous policies
--@uses store
local at, d = takeRecord()
if not at then
  return d
end
local key = KEYS[1]
local capacity = tonumber(ARGV[3])
local r = tonumber(ARGV[4])
local p = tonumber(ARGV[5])
local full = capacity * p
if inherit then
  inherit(now, 7, capacity, 'r', function(u) tbCharged(key, now, u, p, r) end)
end
local last, debt = tbLoad(load(key), now, full, r)
last, debt = tbRefill(last, debt, now, r)
if d < 0 then
  debt = math.max(debt - math.min(-d, capacity) * p, 0)
else
  -- At most one capacity in debt (more only if waiters hold it already).
  debt = math.max(debt, math.min(debt + math.min(d, 2 * capacity) * p, 2 * full))
end
if debt == 0 then
  redis.call('DEL', key)
else
  redis.call('SET', key, tbState(last, debt, full), 'PX', ttl(last + cdiv(debt, r) - now))
end
return 1
