-- Sliding window counter decision. Mirrors slidingCounterAlg.decide: the
-- estimate prev*(w-e)/w + cur is compared exactly, in integers, never
-- rounded in the direction that over-admits.
--
-- KEYS[1]  string "<k> <cur> <prev>": the index of the current window, its
--          count and the previous window's count
-- KEYS[2]  the client's block key; KEYS[3..] its keys under previous policies
-- ARGV     now (µs or ""), n, limit, window (µs), mode, then the previous
--          policies (see chain.lua)
local key = KEYS[1]
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local stored = loaded or redis.call('MGET', key, KEYS[2])
local mode = decisionMode(ARGV[5], stored[2])

local u = inherit and inherit(now, 6, limit, mode, function(u) scCharged(key, now, u, w) end)
if u and writes(mode) then
  stored[1] = redis.call('MGET', key)[1] -- as the conversion stored it
end
local storedK, storedCur, storedPrev = scLoad(stored[1], now, limit, w)
if u and not writes(mode) then
  -- A Peek of inherited state: a fresh state charged u, whatever was
  -- loaded.
  storedK, storedCur, storedPrev = fdiv(now, w), u, 0
end

-- roll: the state as seen at now, and the time elapsed in window k.
local k = fdiv(now, w)
local cur, prev, e = 0, 0, now - k * w
if k == storedK then
  cur, prev = storedCur, storedPrev
elseif k == storedK + 1 then
  prev = storedCur
elseif k < storedK then
  -- Time ran backwards (by at most maxSkew: see scLoad): stay at the
  -- start of the newer window.
  k, cur, prev, e = storedK, storedCur, storedPrev, 0
end
leaseEnd = (k + 1) * w

local function resetAfter(c, p)
  if c > 0 then
    return 2 * w - e
  elseif p > 0 then
    return w - e
  end
  return 0
end

-- retryAfter returns how long until n events fit if nothing else arrives.
-- Mirrors slidingCounterAlg.retryAfter.
local function retryAfter(n)
  if cur + n <= limit then
    -- In this window, at the first e2 with prev*(w-e2) <= (limit-cur-n)*w.
    local e2 = w - math.min(fdiv((limit - cur - n) * w, prev), w)
    if e2 < w then
      return e2 - e
    end
  end
  -- In the next window, where cur becomes the previous count.
  if cur == 0 then
    return w - e
  end
  local e2 = w - math.min(fdiv(math.max(limit - n, 0) * w, cur), w)
  return w - e + e2
end

-- Remaining is the largest m with prev*(w-e)/w + cur + m <= limit.
local rem = limit - cur - cdiv(prev * (w - e), w)

local function decide(n, commit)
  if n <= rem then
    if commit then
      -- Idle once two windows have started since k.
      redis.call('SET', key, scState(k, cur + n, prev, limit), 'PX', ttl((k + 2) * w - now))
    end
    return {1, rem - n, 0, resetAfter(cur + n, prev)}
  end
  return {0, math.max(rem, 0), math.max(retryAfter(n), 1), resetAfter(cur, prev)}
end
return finish(n, mode, decide)
