-- Fixed window decision. Mirrors fixedWindowAlg.decide: windows are aligned
-- to multiples of the window length since the Unix epoch.
--
-- KEYS[1]  string "<k> <count>": the index of the counted window and its count
-- KEYS[2]  the client's block key; KEYS[3..] its keys under previous policies
-- ARGV     now (µs or ""), n, limit, window (µs), mode, then the previous
--          policies (see chain.lua)
local key = KEYS[1]
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local stored = loaded or redis.call('MGET', key, KEYS[2])
local mode = decisionMode(ARGV[5], stored[2])

local u = inherit and inherit(now, 6, limit, mode, function(u) fwCharged(key, now, u, w) end)
if u and writes(mode) then
  stored[1] = redis.call('MGET', key)[1] -- as the conversion stored it
end
local storedK, count = fwLoad(stored[1], now, limit, w)
if u and not writes(mode) then
  -- A Peek of inherited state: a fresh window charged u, whatever was
  -- loaded.
  storedK, count = fdiv(now, w), u
end

local k = fdiv(now, w)
local at = now
if k > storedK then
  count = 0
elseif k < storedK then
  -- Time ran backwards (by at most maxSkew: see fwLoad): stay in the
  -- newer window.
  k = storedK
  at = k * w
end
local untilEnd = (k + 1) * w - at
leaseEnd = (k + 1) * w

local function decide(n, commit)
  if count + n <= limit then
    if commit then
      -- Idle once the window has passed.
      redis.call('SET', key, string.format('%d %d', k, count + n), 'PX', ttl((k + 1) * w - now))
    end
    local reset = 0
    if count + n > 0 then
      reset = untilEnd
    end
    return {1, limit - count - n, 0, reset}
  end
  return {0, math.max(limit - count, 0), untilEnd, untilEnd}
end
return finish(n, mode, decide)
