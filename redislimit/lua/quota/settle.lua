-- Calendar quota settle (takeRecord, settle.lua, gives d and at): the
-- fixed window's settle over calendar periods: give back only while the
-- reservation's period (the one holding at) is the counted one; charge an
-- overrun to the counted period, beyond the limit if need be (up to one
-- limit over). Mirrors quotaAlg.settle.
--
-- KEYS[1]  as in decide.lua; KEYS[#KEYS] the record (settle.lua)
-- ARGV     now (µs or ""), actual, limit, five period boundaries, "r",
--          then the previous policies
--@uses store
local key = KEYS[1]
local limit = tonumber(ARGV[3])
local s, e = qPeriod(now, 4)
if not s then
  return redis.error_reply('ratelimit: Redis clock more than a period away from the application\'s (calendar quota)')
end
local at, d = takeRecord()
if not at then
  return d
end
if inherit then
  inherit(now, 10, limit, 'r', function(u) qCharged(key, now, u, s, e) end)
end
local st, en, count = qLoad(load(key), now, limit, s, e)
d = math.max(math.min(d, maxOver), -maxOver)
local before = count
if st <= at and at < en then
  count = math.max(count + d, 0)
elseif d > 0 then
  count = count + d
end
if d > 0 then
  -- At most one limit over the limit (or where it was).
  count = math.min(count, math.max(2 * limit, before))
end
if count == 0 then
  redis.call('DEL', key)
else
  redis.call('SET', key, qState(st, en, count, limit), 'PX', ttl(en - now))
end
return 1
