-- quota/state.lua: the state helpers of the calendar quota scripts, placed between
-- the prelude and each script.
--
-- A quota's state is "<start> <end> <count>": the counted period (Unix µs,
-- start inclusive, end exclusive) and its count. The period boundaries
-- come from Go (the zone's rules are not in Redis): five consecutive
-- boundaries around the application's time, four periods. The stored
-- bounds are what the processes sharing a key agree on (see qLoad).

-- qMaxPeriod bounds a stored period's length (a leap year and an hour of
-- DST, with room to spare): longer is forged.
local qMaxPeriod = 367 * 86400000000

-- qPeriod returns the period [s, e) of the passed boundaries (ARGV[at] ..
-- ARGV[at+4]) that holds now; nil when now is outside them all.
local function qPeriod(now, at)
  for i = 0, 3 do
    local s, e = tonumber(ARGV[at + i]), tonumber(ARGV[at + i + 1])
    if s <= now and now < e then
      return s, e
    end
  end
  return nil
end

-- qLoad returns, from v (the key's value: a string, or nil or false for
-- none), a quota's valid state at key as seen in the period [s, e)
-- holding now, or the fresh state: no events in [s, e). A state of an
-- older period is counted as fresh. A stored period that holds now is
-- counted in, whether or not it is [s, e): another one is that of a
-- process sharing the key that reads the zone's rules otherwise (one
-- zone name, two tzdata releases or two hosts' settings; the key names
-- the zone by its name only), and processes that disagree about the
-- period must not each count it fresh, overwriting the other's: all count
-- in the stored period until it ends, and the first to count after that
-- stores its own. So does one that starts within maxSkew after now (a
-- clock that stepped back across a boundary). A stored period longer than
-- twice [s, e) (or than qMaxPeriod) is no period of this calendar, and
-- read as fresh.
local function qLoad(v, now, limit, s, e)
  local st, en, c = fields(v, 3)
  local most = limit
  if not st then
    -- Counted beyond the limit (a reservation's overrun): "<start> <end>
    -- <count> <limit>", honoured for this limit only (see maxOver).
    local l
    st, en, c, l = fields(v, 4)
    if l ~= limit then
      st = nil
    end
    most = maxOver
  end
  if st and c >= 0 and c <= most and st < en and en - st <= math.min(2 * (e - s), qMaxPeriod)
      and st - now <= maxSkew and now < en then
    return st, en, c
  end
  return s, e, 0
end

-- qState returns the stored form of a quota's state: the one qLoad reads,
-- with the limit as a fourth field beyond it.
local function qState(st, en, c, limit)
  if c > limit then
    return string.format('%d %d %d %d', st, en, c, limit)
  end
  return string.format('%d %d %d', st, en, c)
end
