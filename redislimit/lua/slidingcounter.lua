-- Sliding window counter decision. Mirrors slidingCounterAlg.decide: the
-- estimate prev*(w-e)/w + cur is compared exactly, in integers, never
-- rounded in the direction that over-admits.
--
-- KEYS[1]  string "<k> <cur> <prev>": the index of the current window, its
--          count and the previous window's count
-- ARGV     now (µs or ""), n, commit (1/0), limit, window (µs)
local key = KEYS[1]
local now = clock()
local n = tonumber(ARGV[2])
local commit = ARGV[3] == '1'
local max = tonumber(ARGV[4])
local w = tonumber(ARGV[5])

local sk, sc, sp = scLoad(key, now, max, w)

-- roll: the state as seen at now, and the time elapsed in window k.
local k = fdiv(now, w)
local cur, prev, e = 0, 0, now - k * w
if k == sk then
  cur, prev = sc, sp
elseif k == sk + 1 then
  prev = sc
elseif k < sk then
  -- Time ran backwards (by at most maxSkew: see scLoad): stay at the
  -- start of the newer window.
  k, cur, prev, e = sk, sc, sp, 0
end

local function resetAfter(c, p)
  if c > 0 then
    return 2 * w - e
  elseif p > 0 then
    return w - e
  end
  return 0
end

-- Remaining is the largest m with prev*(w-e)/w + cur + m <= max.
local rem = max - cur - cdiv(prev * (w - e), w)
if n <= rem then
  if commit then
    -- Idle once two windows have started since k.
    redis.call('SET', key, int(k) .. ' ' .. int(cur + n) .. ' ' .. int(prev), 'PX', ttl((k + 2) * w - now))
  end
  return {1, rem - n, 0, resetAfter(cur + n, prev)}
end

-- retryAfter: how long until n events fit if nothing else arrives.
local retry
local done = false
if cur + n <= max then
  -- In this window, at the first e2 with prev*(w-e2) <= (max-cur-n)*w.
  local e2 = w - math.min(fdiv((max - cur - n) * w, prev), w)
  if e2 < w then
    retry = e2 - e
    done = true
  end
end
if not done then
  -- In the next window, where cur becomes the previous count.
  if cur == 0 then
    retry = w - e
  else
    local e2 = w - math.min(fdiv(math.max(max - n, 0) * w, cur), w)
    retry = w - e + e2
  end
end
return {0, math.max(rem, 0), math.max(retry, 1), resetAfter(cur, prev)}
