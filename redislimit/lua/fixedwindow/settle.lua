-- Fixed window settle (takeRecord, settle.lua, gives d and at): give back
-- only while the reservation's window (that of at) is the counted one;
-- charge an overrun to the counted window, beyond the limit if need be
-- (up to one limit over). Mirrors fixedWindowAlg.settle (settleWindow).
--
-- KEYS[1]  as in decide.lua; KEYS[#KEYS] the record (settle.lua)
-- ARGV     now (µs or ""), actual, limit, window (µs), "r", then the previous policies
--@uses store
local at, d = takeRecord()
if not at then
  return d
end
local key = KEYS[1]
local limit = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
if inherit then
  inherit(now, 6, limit, 'r', function(u) fwCharged(key, now, u, w) end)
end
local sk, count = fwLoad(load(key), now, limit, w)
local k = fdiv(now, w)
if k > sk then
  sk, count = k, 0
end
d = math.max(math.min(d, maxOver), -maxOver)
local before = count
if fdiv(at, w) == sk then
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
  redis.call('SET', key, fwState(sk, count, limit), 'PX', ttl((sk + 1) * w - now))
end
return 1
