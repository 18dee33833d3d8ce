-- Sliding window counter refund: take n events back from the window that
-- holds them. Mirrors slidingCounterAlg.refund.
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
  inherit(now, 6, limit, 'r', function(u) scCharged(key, now, u, w) end)
end
local storedK, storedCur, storedPrev = scLoad(load(key), now, limit, w)
if storedCur == 0 and storedPrev == 0 then
  return 0
end
local k = fdiv(now, w)
if k == storedK then
  local cur = math.max(storedCur - n, 0)
  if cur == 0 and storedPrev == 0 then
    redis.call('DEL', key)
  elseif cur == 0 then
    -- Idle once window k has passed.
    redis.call('SET', key, scState(k, 0, storedPrev, limit), 'PX', ttl((k + 1) * w - now))
  else
    redis.call('SET', key, scState(k, cur, storedPrev, limit), 'PX', ttl((k + 2) * w - now))
  end
  return 1
elseif k == storedK + 1 then
  -- Roll into window k: the refunded window becomes the previous one.
  local prev = math.max(storedCur - n, 0)
  if prev == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, scState(k, 0, prev, limit), 'PX', ttl((k + 1) * w - now))
  end
  return 1
end
return 0
