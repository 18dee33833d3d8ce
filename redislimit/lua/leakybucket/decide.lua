-- Leaky bucket decision (the meter). Mirrors leakyBucketAlg.decide: the
-- level is kept as the time at which the bucket would be empty, one event is
-- `every` µs of level, and the bucket holds span = capacity*every µs at most.
--
-- KEYS[1]  string: Unix µs at which the bucket is empty
-- KEYS[2]  the client's block key; KEYS[3..] its keys under previous policies
-- ARGV     now (µs or ""), n, capacity, every (µs), mode, then the previous
--          policies (see chain.lua)
local key = KEYS[1]
local n = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local every = tonumber(ARGV[4])
local stored = loaded or redis.call('MGET', key, KEYS[2])
local mode = decisionMode(ARGV[5], stored[2])
local span = capacity * every

local u = inherit and inherit(now, 6, capacity, mode, function(u) lbCharged(key, now, u, every) end)
if u and writes(mode) then
  stored[1] = redis.call('MGET', key)[1] -- as the conversion stored it
end
local empty = lbLoad(stored[1], now, span)
if u and not writes(mode) then
  empty = now + u * every
end
local level = math.max(empty - now, 0)

local function decide(n, commit)
  local need = n * every
  if level + need <= span then
    if commit then
      redis.call('SET', key, string.format('%d', now + level + need), 'PX', ttl(level + need))
    end
    return {1, fdiv(span - level - need, every), 0, level + need}
  end
  return {0, fdiv(math.max(span - level, 0), every), level + need - span, level}
end
return finish(n, mode, decide)
