-- Leaky bucket decision (the meter). Mirrors leakyBucketAlg.decide: the
-- level is kept as the time at which the bucket would be empty, one event is
-- `every` µs of level, and the bucket holds span = capacity*every µs at most.
--
-- KEYS[1]  string: Unix µs at which the bucket is empty
-- ARGV     now (µs or ""), n, capacity, every (µs), commit (1/0)
local key = KEYS[1]
local now = clock()
local n = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local every = tonumber(ARGV[4])
local commit = ARGV[5] == '1'
local span = capacity * every

local empty = lbLoad(key, now, span)
local level = math.max(empty - now, 0)
local need = n * every
if level + need <= span then
  if commit then
    redis.call('SET', key, int(now + level + need), 'PX', ttl(level + need))
  end
  return {1, fdiv(span - level - need, every), 0, level + need}
end
return {0, fdiv(math.max(span - level, 0), every), level + need - span, level}
