-- slidinglog/state.lua: the state helpers of the sliding log scripts, placed between
-- the prelude and each script.
--@uses store

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

-- A sliding log is a sorted set. Member "b" has score base; every entry
-- is a member named by its time (decimal Unix µs) whose score is cum, the
-- number of events logged through this entry since the key was made. Times
-- strictly increase with cum (events at or before the newest entry's time
-- merge into it), so the order by score is the order by time. Entries
-- scored at most base are expired ("dead", ranked before "b") and are
-- removed a few per write (an admission or a refund: a denial and a Peek
-- write nothing, see slLoad); live entries follow "b", an entry holds its cum
-- minus the previous score events, and the log holds last cum - base live
-- events. Every lookup is by rank or score, O(log entries): a denial finds
-- the entry whose expiry frees room for n with one ZRANGEBYSCORE, and the
-- expired entries are found by a galloping search, not a walk.

-- slMaxBase: scores are moved back by base once it passes 2^52, so that cum
-- = base + at most limit (<= 2^52, checked in Go) stays exact. That takes
-- 2^52 expired events on a key that never went idle, and rewrites the key
-- once (O(entries)).
local slMaxBase = 4503599627370496

-- slDrop is how many dead entries a write removes: more than the one entry
-- an admission adds, so they drain, and few enough to bound every call.
local slDrop = 16

-- slHead is how many of the lowest ranks slLoad reads in its first call:
-- the dead entries (few: see slDrop), "b" and the first live entries,
-- which are where the search for the expired entries starts. Ranks past
-- them cost a call each.
local slHead = 6

-- slEntry returns the time and cum of the entry at rank r, or nil: from
-- head (the lowest ranks, read by slLoad) when r is among them.
local function slEntry(key, r, head)
  if 2 * r < #head then
    return num(head[2 * r + 1]), score(head[2 * r + 2])
  end
  local e = redis.call('ZRANGE', key, r, r, 'WITHSCORES')
  if #e ~= 2 then
    return nil
  end
  return num(e[1]), score(e[2])
end

-- slLoad reads the sliding log at key as seen at now with window w and
-- limit limit, writing nothing: a denial and a Peek must store nothing (a
-- flood of denials must not become a flood of writes, replicated). It
-- returns base (the log's base once its expired entries are marked dead),
-- the number of live entries, the newest entry's time and cum, and fix:
-- what a write must first do so that the key holds exactly that log (see
-- slFix). With no live entries it returns 0, 0, 0, 0 and fix true when
-- the key must go first: a log that is not one (another type, another
-- layout, counts beyond limit, a newest entry more than min(w, maxSkew) in
-- the future: read as empty), or one whose entries all expired.
local function slLoad(key, now, limit, w)
  local card = redis.pcall('ZCARD', key)
  if type(card) ~= 'number' then
    return 0, 0, 0, 0, true -- another type
  end
  if card == 0 then
    return 0, 0, 0, 0, nil
  end
  -- "b" is almost always among the lowest ranks: its rank and base come
  -- with them, else from ZRANK and ZSCORE.
  local head = redis.call('ZRANGE', key, 0, slHead - 1, 'WITHSCORES')
  local base, rb
  for i = 1, #head, 2 do
    if head[i] == 'b' then
      rb, base = (i - 1) / 2, score(head[i + 1])
      break
    end
  end
  if not rb and #head == 2 * slHead then
    base = score(redis.call('ZSCORE', key, 'b'))
    rb = redis.call('ZRANK', key, 'b')
  end
  if not rb or not base or base < 0 then
    return 0, 0, 0, 0, true
  end
  local last = card - 1
  local entries = last - rb
  local lastTS, lastCum = slEntry(key, last, head)
  if entries < 1 or not lastTS or not lastCum or lastCum - base < entries or lastCum - base > limit
      or lastTS - now > math.min(w, maxSkew) then
    return 0, 0, 0, 0, true
  end
  -- The expired entries (ts <= now - w) are ranks rb+1 .. lo: gallop,
  -- then bisect, for the largest such lo. Invariant: rank lo is "b" or
  -- expired, with cum loCum; rank hi, once known, is live or past the end.
  -- Cums rise with rank: a probe that breaks that is a forged log.
  local cutoff = now - w
  local lo, loCum, step, hi = rb, base, 1, nil
  while not hi or hi - lo > 1 do
    local r = hi and math.floor((lo + hi) / 2) or lo + step
    if not hi and r >= last then
      if lastTS <= cutoff then
        lo, loCum, hi = last, lastCum, last + 1
      else
        hi = last
      end
    else
      local ts, cum = slEntry(key, r, head)
      if not ts or not cum or cum <= loCum or cum > lastCum then
        return 0, 0, 0, 0, true
      end
      if ts > cutoff then
        hi = r
      else
        lo, loCum, step = r, cum, step * 2
      end
    end
  end
  if lo == last then
    return 0, 0, 0, 0, true -- everything expired
  end
  -- The dead entries before "b" to drop (a few: see slDrop), and the
  -- base that marks the newly expired ones dead; when the dead, "b" and
  -- the newly expired are few, they all go at once and "b" comes back at
  -- the new base.
  local fix = nil
  if lo > rb and lo < slDrop then
    fix = {lo + 1, loCum}
  elseif rb > 0 or lo > rb then
    fix = {math.min(rb, slDrop), lo > rb and loCum or nil}
  end
  return loCum, last - lo, lastTS, lastCum, fix
end

-- slFix makes the key hold the log slLoad read, before a write: it
-- removes the key (fix true), or drops some dead entries (and, when fix
-- says so, "b" and the newly expired entries with them) and puts "b" at
-- the new base (fix = {ranks to drop from 0, new base or nil}). An entry
-- to add (its cum and member), when given, goes in with "b" in one ZADD;
-- it is never given with fix true (then there is no "b" to keep it).
local function slFix(key, fix, cum, member)
  if fix == true then
    unlink(key)
  elseif fix then
    if fix[1] > 0 then
      redis.call('ZREMRANGEBYRANK', key, 0, fix[1] - 1)
    end
    if fix[2] then
      if member then
        redis.call('ZADD', key, int(fix[2]), 'b', cum, member)
        return
      end
      redis.call('ZADD', key, int(fix[2]), 'b')
    end
  end
  if member then
    redis.call('ZADD', key, cum, member)
  end
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
