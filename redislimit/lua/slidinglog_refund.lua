-- Sliding log refund: drop the expired entries, then remove the newest n
-- events. Mirrors slidingLogAlg.refund: under concurrent traffic on the same
-- key these may be another request's events a moment younger than the
-- refunded ones; the count is exact.
--
-- KEYS[1]  as in slidinglog.lua
-- ARGV     now (µs or ""), n, limit, window (µs)
local key = KEYS[1]
local len = redis.call('LLEN', key)
if len == 0 then
  return 0
end
local now = clock()
local n = tonumber(ARGV[2])
local w = tonumber(ARGV[4])
local cutoff = now - w
local total = tonumber(redis.call('LINDEX', key, 0))
local entries = (len - 1) / 2

local expired, expiredN = logExpired(key, entries, cutoff)
total = total - expiredN
entries = entries - expired

-- Remove n events from the back.
while n > 0 and entries > 0 do
  local backN = tonumber(redis.call('LINDEX', key, -1))
  if backN > n then
    redis.call('LSET', key, -1, backN - n)
    total = total - n
    n = 0
  else
    redis.call('RPOP', key)
    redis.call('RPOP', key)
    total = total - backN
    n = n - backN
    entries = entries - 1
  end
end

if entries == 0 then
  redis.call('DEL', key)
  return 1
end
if expired > 0 then
  redis.call('LTRIM', key, int(1 + 2 * expired), -1)
  redis.call('LPUSH', key, total)
else
  redis.call('LSET', key, 0, total)
end
local back = tonumber(redis.call('LINDEX', key, -2))
expire(key, back + w - now)
return 1
