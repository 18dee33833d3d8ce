-- Calendar quota decision. Mirrors quotaAlg.decide: at most limit events
-- per calendar period, the periods passed by Go as five boundaries around
-- the application's time; the script picks the one holding its now (the
-- server's TIME unless the caller passed its time) and fails when now is
-- outside them all: the Redis clock is more than a period away from the
-- application's.
--
-- KEYS[1]  string "<start> <end> <count>": the counted period and its count
-- KEYS[2]  the client's block key; KEYS[3..] its keys under previous policies
-- ARGV     now (µs or ""), n, limit, five boundaries (Unix µs), mode, then
--          the previous policies (see chain.lua)
local key = KEYS[1]
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local stored = loaded or redis.call('MGET', key, KEYS[2])
local mode = decisionMode(ARGV[9], stored[2])

local s, e = qPeriod(now, 4)
if not s then
  return redis.error_reply('ratelimit: Redis clock more than a period away from the application\'s (calendar quota)')
end

local u = inherit and inherit(now, 10, limit, mode, function(u) qCharged(key, now, u, s, e) end)
if u and writes(mode) then
  stored[1] = redis.call('MGET', key)[1] -- as the conversion stored it
end
local st, en, count = qLoad(stored[1], now, limit, s, e)
if u and not writes(mode) then
  -- A Peek of inherited state: the current period charged u, whatever
  -- was loaded.
  st, en, count = s, e, u
end
local at = now
if st > now then
  -- Time ran backwards (by at most maxSkew: see qLoad): stay in the newer
  -- period, from its start.
  at = st
end
local untilEnd = en - at
leaseEnd = en

local function decide(n, commit)
  if count + n <= limit then
    if commit then
      -- Idle once the period has passed.
      redis.call('SET', key, string.format('%d %d %d', st, en, count + n), 'PX', ttl(en - now))
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
