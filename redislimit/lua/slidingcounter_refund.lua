-- Sliding window counter refund: take n events back from the window that
-- holds them. Mirrors slidingCounterAlg.refund.
--
-- KEYS[1]  as in slidingcounter.lua
-- ARGV     now (µs or ""), n, limit, window (µs)
local key = KEYS[1]
local st = redis.call('HMGET', key, 'k', 'c', 'p')
if not st[1] then
  return 0
end
local now = clock()
local n = tonumber(ARGV[2])
local w = tonumber(ARGV[4])
local sk = tonumber(st[1])
local sc = tonumber(st[2]) or 0
local sp = tonumber(st[3]) or 0
local k = fdiv(now, w)
if k == sk then
  local cur = math.max(sc - n, 0)
  if cur == 0 and sp == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'c', cur)
    if cur == 0 then
      -- Idle once window k has passed.
      expire(key, (k + 1) * w - now)
    end
  end
  return 1
elseif k == sk + 1 then
  -- Roll into window k: the refunded window becomes the previous one.
  local prev = math.max(sc - n, 0)
  if prev == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'k', k, 'c', 0, 'p', prev)
    expire(key, (k + 1) * w - now)
  end
  return 1
end
return 0
