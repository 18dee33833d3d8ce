-- Token bucket refund: refill up to now, then give back n tokens, never
-- above a full bucket. Mirrors tokenBucketAlg.refund. A lease's give-back
-- (mode 'g<at>', or giveBackAt in a lease script) gives back only what
-- refill since the grant has not cancelled (see prelude.lua).
--
-- KEYS[1]  as in decide.lua
-- ARGV     now (µs or ""), n, capacity, r, p, "r" or "g<at>", then the previous policies
--@uses store
local key = KEYS[1]
local n = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local r = tonumber(ARGV[4])
local p = tonumber(ARGV[5])
local backAt = giveBackAt or givenBackAt(ARGV[6])
if inherit then
  inherit(now, 7, capacity, 'r', function(u) tbCharged(key, now, u, p, r) end)
end
local last, debt = tbLoad(load(key), now, capacity * p, r)
if debt == 0 then
  return 0
end
last, debt = tbRefill(last, debt, now, r)

local units = n * p
if backAt then
  units = math.max(units - r * math.max(last - backAt, 0), 0)
  if units == 0 then
    return 0
  end
end
debt = math.max(debt - units, 0)
if debt == 0 then
  redis.call('DEL', key)
else
  redis.call('SET', key, tbState(last, debt, capacity * p), 'PX', ttl(last + cdiv(debt, r) - now))
end
return 1
