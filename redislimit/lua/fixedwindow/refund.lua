-- Fixed window refund: take n events back from the current window if it is
-- the one that holds them. Mirrors fixedWindowAlg.refund.
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
  inherit(now, 6, limit, 'r', function(u) fwCharged(key, now, u, w) end)
end
local k, stored = fwLoad(load(key), now, limit, w)
if fdiv(now, w) ~= k or stored == 0 then
  return 0
end
local count = math.max(stored - n, 0)
if count == 0 then
  redis.call('DEL', key)
else
  redis.call('SET', key, fwState(k, count, limit), 'PX', ttl((k + 1) * w - now))
end
return 1
