-- Sliding log refund: drop the expired entries, then remove the newest n
-- events. Mirrors slidingLogAlg.refund: under concurrent traffic on the same
-- key these may be another request's events a moment younger than the
-- refunded ones; the count is exact.
--
-- KEYS[1]  as in decide.lua
-- ARGV     now (µs or ""), n, limit, window (µs), "r", then the previous policies
--@uses store
local key = KEYS[1]
local now = giveBackAt or now -- a lease's give-back: its grant time
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
if inherit then
  inherit(now, 6, limit, 'r', function(u) slCharged(key, now, u, w) end)
end
local _, entries, _, _, fix = slLoad(key, now, limit, w)
if entries == 0 then
  return 0
end
slFix(key, fix)

-- Remove n events from the back: each entry removed was added once.
while n > 0 and entries > 0 do
  local back = redis.call('ZRANGE', key, -2, -1, 'WITHSCORES')
  local prevCum, backCum = score(back[2]), score(back[4])
  if not prevCum or not backCum or backCum <= prevCum then
    redis.call('DEL', key) -- forged: read as fresh from now on
    return 1
  end
  local backN = backCum - prevCum
  if backN > n then
    redis.call('ZADD', key, int(backCum - n), back[3])
    n = 0
  else
    redis.call('ZREM', key, back[3])
    n = n - backN
    entries = entries - 1
  end
end

if entries == 0 then
  unlink(key)
  return 1
end
local back = redis.call('ZRANGE', key, -1, -1)
expire(key, tonumber(back[1]) + w - now)
return 1
