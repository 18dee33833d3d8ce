-- Fixed window decision. Mirrors fixedWindowAlg.decide: windows are aligned
-- to multiples of the window length since the Unix epoch.
--
-- KEYS[1]  hash {k = index of the counted window, c = its count}
-- ARGV     now (µs or ""), n, commit (1/0), limit, window (µs)
local key = KEYS[1]
local now = clock()
local n = tonumber(ARGV[2])
local commit = ARGV[3] == '1'
local max = tonumber(ARGV[4])
local w = tonumber(ARGV[5])

local st = redis.call('HMGET', key, 'k', 'c')
local sk = tonumber(st[1]) or 0
local count = tonumber(st[2]) or 0

local k = fdiv(now, w)
local at = now
if k > sk then
  count = 0
elseif k < sk then
  -- Time ran backwards: stay in the newer window.
  k = sk
  at = k * w
end
local untilEnd = (k + 1) * w - at
if count + n <= max then
  if commit then
    redis.call('HSET', key, 'k', k, 'c', count + n)
    -- Idle once the window has passed.
    expire(key, (k + 1) * w - now)
  end
  local reset = 0
  if count + n > 0 then
    reset = untilEnd
  end
  return {1, max - count - n, 0, reset}
end
return {0, math.max(max - count, 0), untilEnd, untilEnd}
