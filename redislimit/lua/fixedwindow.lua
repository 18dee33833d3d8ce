-- Fixed window decision. Mirrors fixedWindowAlg.decide: windows are aligned
-- to multiples of the window length since the Unix epoch.
--
-- KEYS[1]  string "<k> <count>": the index of the counted window and its count
-- ARGV     now (µs or ""), n, commit (1/0), limit, window (µs)
local key = KEYS[1]
local now = clock()
local n = tonumber(ARGV[2])
local commit = ARGV[3] == '1'
local max = tonumber(ARGV[4])
local w = tonumber(ARGV[5])

local sk, count = fwLoad(key, now, max, w)

local k = fdiv(now, w)
local at = now
if k > sk then
  count = 0
elseif k < sk then
  -- Time ran backwards (by at most maxSkew: see fwLoad): stay in the
  -- newer window.
  k = sk
  at = k * w
end
local untilEnd = (k + 1) * w - at
if count + n <= max then
  if commit then
    -- Idle once the window has passed.
    redis.call('SET', key, int(k) .. ' ' .. int(count + n), 'PX', ttl((k + 1) * w - now))
  end
  local reset = 0
  if count + n > 0 then
    reset = untilEnd
  end
  return {1, max - count - n, 0, reset}
end
return {0, math.max(max - count, 0), untilEnd, untilEnd}
