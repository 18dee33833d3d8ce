-- Calendar quota refund: take n events back from the counted period (see
-- qLoad) if it holds now. Mirrors quotaAlg.refund.
--
-- KEYS[1]  as in decide.lua
-- ARGV     now (µs or ""), n, limit, five boundaries (Unix µs), "r", then
--          the previous policies
--@uses store
local key = KEYS[1]
local now = giveBackAt or now -- a lease's give-back: its grant time
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local s, e = qPeriod(now, 4)
if not s then
  return redis.error_reply('ratelimit: Redis clock more than a period away from the application\'s (calendar quota)')
end
if inherit then
  inherit(now, 10, limit, 'r', function(u) qCharged(key, now, u, s, e) end)
end
local st, en, stored = qLoad(load(key), now, limit, s, e)
if st > now or stored == 0 then
  return 0 -- nothing counted, or only in a newer period (see qLoad)
end
local count = math.max(stored - n, 0)
if count == 0 then
  redis.call('DEL', key)
else
  redis.call('SET', key, qState(st, en, count, limit), 'PX', ttl(en - now))
end
return 1
