-- Acquire n permits as member, if they fit under the limit.
--
-- KEYS[1] the client's permits (concurrency/helpers.lua)
-- ARGV    "" (the server's time), n, limit, expiry ms, member
-- returns {allowed (0/1), permits held after}
--@uses concurrency/helpers
local key = KEYS[1]
local n, limit, ttl, member = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local held = live(key)
if redis.call('ZSCORE', key, member) then
  -- The same call sent again (its first reply was lost): it holds them.
  redis.call('ZADD', key, nowMs + ttl, member)
  keepUntil(key, ttl)
  return {1, held}
end
if held + n > limit then
  return {0, held}
end
redis.call('ZADD', key, nowMs + ttl, member)
keepUntil(key, ttl)
return {1, held + n}
