-- Renew the members given: each one still held (present and unexpired)
-- expires ttl ms from now; one that is gone is not brought back.
--
-- KEYS[1] the client's permits (concurrency/helpers.lua)
-- ARGV    "" (the server's time), expiry ms, member...
-- returns one 1 (renewed) or 0 (gone) per member
--@uses concurrency/helpers
local key, ttl = KEYS[1], tonumber(ARGV[2])
local out = {}
local any = false
for i = 3, #ARGV do
  local s = tonumber(redis.call('ZSCORE', key, ARGV[i]))
  if s and s > nowMs then
    redis.call('ZADD', key, 'XX', nowMs + ttl, ARGV[i])
    out[#out + 1] = 1
    any = true
  else
    if s then
      redis.call('ZREM', key, ARGV[i])
    end
    out[#out + 1] = 0
  end
end
if any then
  keepUntil(key, ttl)
end
return out
