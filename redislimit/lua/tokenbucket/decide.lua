-- Token bucket decision. Mirrors tokenBucketAlg.decide in the ratelimit
-- package with time in microseconds: tokens are counted in units of 1/p
-- token and one microsecond refills r units, where r/p = refill/period(µs) in
-- lowest terms; a full bucket is capacity*p units.
--
-- KEYS[1]  string "<last> <debt>": the last update (Unix µs) and the debt,
--          units missing from a full bucket
-- KEYS[2]  the client's block key; KEYS[3..] its keys under previous policies
-- ARGV     now (µs, or "" for the server's TIME), n, capacity, r, p, mode,
--          then the previous policies (see chain.lua)
local key = KEYS[1]
local n = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local r = tonumber(ARGV[4])
local p = tonumber(ARGV[5])
local stored = loaded or redis.call('MGET', key, KEYS[2])
local mode = decisionMode(ARGV[6], stored[2])
local full = capacity * p

local u = inherit and inherit(now, 7, capacity, mode, function(u) tbCharged(key, now, u, p, r) end)
if u and writes(mode) then
  stored[1] = redis.call('MGET', key)[1] -- as the conversion stored it
end
local last, debt = tbLoad(stored[1], now, full, r)
if u and not writes(mode) then
  last, debt = now, u * p
end
last, debt = tbRefill(last, debt, now, r)

local function decide(n, commit)
  local need = n * p
  local avail = full - debt
  if avail >= need then
    local nd = debt + need
    local toFull = cdiv(nd, r) -- µs until the bucket is full again
    if commit then
      -- Idle (back to full) once now - last >= ceil(nd / r).
      redis.call('SET', key, string.format('%d %d', last, nd), 'PX', ttl(last + toFull - now))
    end
    return {1, fdiv(avail - need, p), 0, toFull}
  end
  return {0, fdiv(math.max(avail, 0), p), cdiv(need - avail, r), cdiv(debt, r)}
end
return finish(n, mode, decide)
