-- Sliding counter settle (takeRecord, settle.lua, gives d and at): give
-- back while the reservation's window (that of at) still counts, the
-- current one or the previous (weighted); charge an overrun to that
-- window, or to the current one when the reservation's has passed,
-- beyond the limit if need be (up to one limit over). Mirrors
-- slidingCounterAlg.settle.
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
  inherit(now, 6, limit, 'r', function(u) scCharged(key, now, u, w) end)
end
local storedK, storedCur, storedPrev = scLoad(load(key), now, limit, w)
local k = fdiv(now, w)
local cur, prev = 0, 0
if k == storedK then
  cur, prev = storedCur, storedPrev
elseif k == storedK + 1 then
  prev = storedCur
elseif k < storedK then
  -- Time ran backwards (see scLoad): stay in the newer window.
  k, cur, prev = storedK, storedCur, storedPrev
end
local k0 = fdiv(at, w)
local most = scMost(w)
d = math.max(math.min(d, most), -most)
-- An overrun leaves a window at most one limit over (or where it was).
local top = math.min(2 * limit, 2147483647)
local function add(c)
  return math.min(math.max(c + d, 0), math.max(top, c))
end
if k0 == k then
  cur = add(cur)
elseif k0 == k - 1 then
  prev = add(prev)
elseif d > 0 then
  cur = add(cur)
end
cur = math.min(math.max(cur, 0), most)
prev = math.min(math.max(prev, 0), most)
if cur == 0 and prev == 0 then
  redis.call('DEL', key)
else
  redis.call('SET', key, scState(k, cur, prev, limit), 'PX', ttl((k + 2) * w - now))
end
return 1
