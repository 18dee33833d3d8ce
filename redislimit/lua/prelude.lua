-- prelude.lua is prepended to every script of package redislimit.
--
-- Numbers are Lua doubles: integers are exact below 2^53, and every quantity
-- these scripts handle (Unix microseconds, scaled token units, counts times
-- window lengths) is validated in Go to stay below that. Time is in integer
-- microseconds throughout.

-- Scripts read TIME and then write: Redis 5+ replicates their effects, older
-- servers need to be asked to (the call is a no-op returning true on 7).
if redis.replicate_commands then redis.replicate_commands() end

-- fdiv returns floor(a/b) for exact integers a >= 0 and b > 0. The double
-- quotient a/b is rounded; its floor could only be one too large when the
-- exact quotient lies within half an ulp below an integer, which takes
-- a >= 2^53 (a = q*b - 1 needs q*b >= 2^53 for 1/b to vanish next to q).
-- The exact remainder check costs little and keeps the result right even
-- then, as long as q*b stays exact.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- cdiv returns ceil(a/b) for exact integers a >= 0 and b > 0.
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end

-- slack is added to every TTL. With time passed in by the caller (ARGV[1])
-- the Redis server's clock, which runs the TTLs, is not the clock that
-- decides: state is then kept one minute past idle, so that callers whose
-- clocks lag by up to that much, or a paused test clock, still find it.
local slack = 0

-- clock returns the decision time in Unix microseconds: ARGV[1] when the
-- caller passed one, the Redis server's clock otherwise.
local function clock()
  local now = tonumber(ARGV[1])
  if now then
    slack = 60000000
    return now
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- ttl returns the TTL in milliseconds for state that becomes idle in us
-- microseconds: rounded up, so that a key never vanishes before its state
-- is idle, plus the slack. It is formatted here because Redis 7.2+ turns
-- Lua numbers into strings with the shortest round-trip form, which for
-- round numbers such as 1e8 is exponent notation that PEXPIRE and SET PX
-- reject. (Stored state is read back with tonumber, which accepts both.)
local function ttl(us)
  return string.format('%d', math.max(cdiv(us + slack, 1000), 1))
end

-- int formats an integer argument that Redis must parse as an integer (a
-- list index), for the same reason.
local function int(x)
  return string.format('%d', x)
end

-- expire sets key to expire once its state is idle, us microseconds from now.
local function expire(key, us)
  redis.call('PEXPIRE', key, ttl(us))
end

-- Every script ends by returning {allowed (0/1), remaining, retryAfter µs,
-- resetAfter µs} (decisions) or 1/0 (refunds: whether state was changed).

-- Stored state is read as untrusted: garbage, another Redis type, a state
-- of another policy or one from far in the future must read as fresh state
-- (and be overwritten by the next write), never raise a script error (which
-- the failure policy would turn into an admission) and never lock a key out.

-- maxSkew bounds how far ahead of now stored state may lie and still be
-- honoured as a clock that stepped back a little (or, with client time, a
-- caller whose clock lags another's): the state then holds its quota, as it
-- would have. Beyond min(idle time of the policy, maxSkew) it is foreign or
-- forged, and read as fresh. One minute, the same as the client-time slack.
local maxSkew = 60000000

-- load returns the string stored at key, or nil when there is none or the
-- key holds another type (SET replaces any type, so the next write repairs
-- it).
local function load(key)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then
    return nil
  end
  return v
end

-- num parses a decimal integer as written by int(): digits with an optional
-- minus sign, exact (below 2^53 in magnitude). Anything else gives nil.
local function num(s)
  if not s or not string.find(s, '^%-?%d+$') or #s > 17 then
    return nil
  end
  local x = tonumber(s)
  if x and x > -9007199254740992 and x < 9007199254740992 then
    return x
  end
  return nil
end

-- score parses a sorted set score reply as an exact integer, or gives nil.
-- Redis may format scores in exponent notation (7.2+ prints the shortest
-- round-trip form, 1e+08 for 100000000), which tonumber reads exactly.
local function score(s)
  local x = tonumber(s)
  if x and x == math.floor(x) and x > -9007199254740992 and x <= 9007199254740992 then
    return x
  end
  return nil
end

-- fields returns the integers of a stored state of exactly count (1, 2 or
-- 3) space-separated fields, or nil when v is not one.
local function fields(v, count)
  if not v then
    return nil
  end
  if count == 1 then
    return num(v)
  elseif count == 2 then
    local a, b = string.match(v, '^(%-?%d+) (%-?%d+)$')
    a, b = num(a), num(b)
    if a and b then
      return a, b
    end
    return nil
  end
  local a, b, c = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  a, b, c = num(a), num(b), num(c)
  if a and b and c then
    return a, b, c
  end
  return nil
end

-- windowOK reports whether a stored window index sk may be honoured at now
-- with windows of w µs: a past or current window, or the next one when it
-- starts within maxSkew (a clock that stepped back across a boundary).
local function windowOK(sk, now, w)
  local k = fdiv(now, w)
  return sk <= k or (sk == k + 1 and sk * w - now <= maxSkew)
end

-- tbLoad returns a token bucket's valid state "<last> <debt>" at key, or
-- the fresh state 0, 0: the debt must be within a full bucket, and last at
-- most min(refill time, maxSkew) ahead of now.
local function tbLoad(key, now, full, r)
  local last, debt = fields(load(key), 2)
  if last and last >= 0 and debt >= 0 and debt <= full and last - now <= math.min(cdiv(full, r), maxSkew) then
    return last, debt
  end
  return 0, 0
end

-- lbLoad returns a leaky bucket's valid state (the time it is empty) at
-- key, or the fresh 0: its level may exceed span only by what a clock that
-- stepped back explains, min(span, maxSkew).
local function lbLoad(key, now, span)
  local empty = fields(load(key), 1)
  if empty and empty >= 0 and empty - now <= span + math.min(span, maxSkew) then
    return empty
  end
  return 0
end

-- fwLoad returns a fixed window's valid state "<k> <count>" at key, or the
-- fresh 0, 0.
local function fwLoad(key, now, max, w)
  local sk, count = fields(load(key), 2)
  if sk and count >= 0 and count <= max and windowOK(sk, now, w) then
    return sk, count
  end
  return 0, 0
end

-- scLoad returns a sliding counter's valid state "<k> <cur> <prev>" at key,
-- or the fresh 0, 0, 0.
local function scLoad(key, now, max, w)
  local sk, sc, sp = fields(load(key), 3)
  if sk and sc >= 0 and sc <= max and sp >= 0 and sp <= max and windowOK(sk, now, w) then
    return sk, sc, sp
  end
  return 0, 0, 0
end

-- tbRefill returns a token bucket's last update and debt refilled up to now
-- at r units per microsecond; time that runs backwards refills nothing.
-- Mirrors tokenBucketAlg.advance.
local function tbRefill(last, debt, now, r)
  local e = now - last
  if e <= 0 then
    return last, debt
  end
  if debt > 0 then
    if e >= cdiv(debt, r) then
      debt = 0
    else
      debt = debt - e * r
    end
  end
  return now, debt
end

-- A sliding log is a sorted set. Member "b" has score base; every entry
-- is a member named by its time (decimal Unix µs) whose score is cum, the
-- number of events logged through this entry since the key was made. Times
-- strictly increase with cum (events at or before the newest entry's time
-- merge into it), so the order by score is the order by time. Entries
-- scored at most base are expired ("dead", ranked before "b") and are
-- removed a few per call; live entries follow "b", an entry holds its cum
-- minus the previous score events, and the log holds last cum - base live
-- events. Every lookup is by rank or score, O(log entries): a denial finds
-- the entry whose expiry frees room for n with one ZRANGEBYSCORE, and the
-- expired entries are found by a galloping search, not a walk.

-- slMaxBase: scores are moved back by base once it passes 2^52, so that cum
-- = base + at most limit (<= 2^52, checked in Go) stays exact. That takes
-- 2^52 expired events on a key that never went idle, and rewrites the key
-- once (O(entries)).
local slMaxBase = 4503599627370496

-- slDrop is how many dead entries a call removes: more than the one entry
-- a call can add, so they drain, and few enough to bound every call.
local slDrop = 16

-- slEntry returns the time and cum of the entry at rank r, or nil.
local function slEntry(key, r)
  local e = redis.call('ZRANGE', key, r, r, 'WITHSCORES')
  if #e ~= 2 then
    return nil
  end
  return num(e[1]), score(e[2])
end

-- slLoad reads the sliding log at key as seen at now with window w and
-- limit max, marking its expired entries dead. It returns base, the number
-- of live entries, the newest entry's time and cum; with no live entries,
-- 0, 0, 0, 0 and no key. A log that is not one (another type, another
-- layout, counts beyond max, a newest entry more than min(w, maxSkew) in the
-- future) is removed and read as empty. UNLINK frees a large key off
-- Redis's main thread.
local function slLoad(key, now, max, w)
  local card = redis.pcall('ZCARD', key)
  if type(card) ~= 'number' then
    redis.call('DEL', key) -- another type
    return 0, 0, 0, 0
  end
  if card == 0 then
    return 0, 0, 0, 0
  end
  local base = score(redis.call('ZSCORE', key, 'b'))
  local rb = redis.call('ZRANK', key, 'b')
  if not base or base < 0 then
    redis.call('UNLINK', key)
    return 0, 0, 0, 0
  end
  if rb > 0 then
    local drop = math.min(rb, slDrop)
    redis.call('ZREMRANGEBYRANK', key, 0, drop - 1)
    rb, card = rb - drop, card - drop
  end
  local last = card - 1
  local entries = last - rb
  local lastTS, lastCum = slEntry(key, last)
  if entries < 1 or not lastTS or not lastCum or lastCum - base < entries or lastCum - base > max
      or lastTS - now > math.min(w, maxSkew) then
    redis.call('UNLINK', key)
    return 0, 0, 0, 0
  end
  -- The expired entries (ts <= now - w) are ranks rb+1 .. j: gallop, then
  -- bisect, for the largest such j.
  local cutoff = now - w
  local ts, cum = slEntry(key, rb + 1)
  if not ts or not cum or cum <= base or cum > lastCum then
    redis.call('UNLINK', key)
    return 0, 0, 0, 0
  end
  if ts > cutoff then
    return base, entries, lastTS, lastCum
  end
  -- Invariant: rank lo is expired (with cum lo_cum), rank hi is live or
  -- past the end.
  local lo, loCum, step, hi = rb + 1, cum, 1, nil
  while not hi do
    local r = lo + step
    if r >= last then
      if lastTS <= cutoff then
        lo, loCum, hi = last, lastCum, last + 1
      else
        hi = last
      end
    else
      ts, cum = slEntry(key, r)
      if not ts or not cum or cum <= loCum or cum > lastCum then
        redis.call('UNLINK', key)
        return 0, 0, 0, 0
      end
      if ts > cutoff then
        hi = r
      else
        lo, loCum, step = r, cum, step * 2
      end
    end
  end
  while hi - lo > 1 do
    local r = math.floor((lo + hi) / 2)
    ts, cum = slEntry(key, r)
    if not ts or not cum or cum <= loCum or cum > lastCum then
      redis.call('UNLINK', key)
      return 0, 0, 0, 0
    end
    if ts > cutoff then
      hi = r
    else
      lo, loCum = r, cum
    end
  end
  if lo == last then
    redis.call('UNLINK', key) -- everything expired
    return 0, 0, 0, 0
  end
  redis.call('ZADD', key, int(loCum), 'b')
  return loCum, last - lo, lastTS, lastCum
end

-- slRebase moves a sliding log's base back to 0 once it passes slMaxBase.
local function slRebase(key, base)
  if base <= slMaxBase then
    return 0
  end
  local items = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for j = 1, #items, 2 do
    local c = score(items[j + 1])
    if c then
      redis.call('ZADD', key, int(c - base), items[j])
    else
      redis.call('ZREM', key, items[j]) -- forged, and never read
    end
  end
  return base
end
