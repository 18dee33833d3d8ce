-- Sliding log decision. Mirrors slidingLogAlg.decide: at most limit events in
-- any interval of length w; an entry is kept while ts > now - w.
--
-- KEYS[1]  sorted set: "b" scored base, then one member per entry named by
--          its time (Unix µs) and scored with the events from base through
--          it (see slLoad in state.lua). Events at the time of the newest
--          entry, or earlier, merge into it, so there is at most one entry
--          per microsecond: at most limit entries.
-- KEYS[2]  the client's block key; KEYS[3..] its keys under previous policies
-- ARGV     now (µs or ""), n, limit, window (µs), mode, then the previous
--          policies (see chain.lua)
--
-- Every call costs O(log entries), plus the expired entries it drops, each
-- dropped once. Only an admission writes (and drops them): a denial and a
-- Peek read the log as it would be once the expired entries are dropped,
-- and store nothing.
local key = KEYS[1]
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local mode = decisionMode(ARGV[5], load(KEYS[2]))

local u = inherit and inherit(now, 6, limit, mode, function(u) slCharged(key, now, u, w) end)
local base, entries, backTS, backCum, fix = slLoad(key, now, limit, w)
-- virtual: a Peek of inherited state that was not stored, one entry of u
-- events at now.
local virtual = u and u > 0 and not writes(mode)
if virtual then
  base, entries, backTS, backCum = 0, 1, now, u
end
local total = backCum - base

local function decide(n, commit)
  local after = total + n
  if after <= limit then
    local reset = 0
    if after > 0 then
      local newest = now
      if entries > 0 and (n == 0 or backTS > now) then
        newest = backTS
      end
      reset = newest + w - now
    end
    if commit and n > 0 then
      local newest = now
      if entries == 0 then
        slFix(key, fix)
        redis.call('ZADD', key, 0, 'b', int(n), int(now))
      else
        -- Late or simultaneous events merge into the newest entry.
        if now <= backTS then
          newest = backTS
        end
        if base > slMaxBase then
          slFix(key, fix)
          redis.call('ZADD', key, int(backCum - slRebase(key, base) + n), int(newest))
        else
          slFix(key, fix, int(backCum + n), int(newest))
        end
      end
      fix = nil
      -- Idle once the newest entry is w old.
      expire(key, newest + w - now)
    end
    return {1, limit - after, 0, reset}
  end

  -- Denied: the entry whose expiry frees enough room for n is the first whose
  -- cum reaches base + (after - limit).
  local ts = now
  if not virtual then
    local found = redis.call('ZRANGEBYSCORE', key, int(base + (after - limit)), '+inf', 'LIMIT', 0, 1)
    ts = num(found[1])
  end
  if not ts or ts > backTS then
    -- Only a forged log gets here: read it as empty, as slLoad reads the
    -- logs it finds forged, and decide again (an admission replaces it).
    base, entries, backTS, backCum, total, fix = 0, 0, 0, 0, 0, true
    return decide(n, commit)
  end
  return {0, math.max(limit - total, 0), ts + w - now, backTS + w - now}
end
return finish(n, mode, decide)
