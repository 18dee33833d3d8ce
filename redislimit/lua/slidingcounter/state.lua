-- slidingcounter/state.lua: the state helpers of the sliding counter scripts, placed between
-- the prelude and each script.
--@uses window

-- scMost bounds a sliding counter's counts with windows of w µs: within
-- Go's int32 counts, and with count x window below 2^53 (the estimate
-- multiplies them).
local function scMost(w)
  return math.min(2147483647, fdiv(9007199254740991, w))
end

-- scLoad returns, from v (the key's value: a string, or nil or false for
-- none), a sliding counter's valid state "<k> <cur> <prev>" at key
-- (the index of the newest window counted, its count and the previous
-- window's count), or the fresh state: no events in this window or the
-- previous.
local function scLoad(v, now, limit, w)
  local storedK, storedCur, storedPrev = fields(v, 3)
  local most = limit
  if not storedK then
    -- A count beyond the limit (a reservation's overrun): "<k> <cur>
    -- <prev> <limit>", honoured for this limit only (see maxOver and
    -- scMost).
    local l
    storedK, storedCur, storedPrev, l = fields(v, 4)
    if l ~= limit then
      storedK = nil
    end
    most = scMost(w)
  end
  if storedK and storedCur >= 0 and storedCur <= most and storedPrev >= 0 and storedPrev <= most
      and windowOK(storedK, now, w) then
    return storedK, storedCur, storedPrev
  end
  return fdiv(now, w), 0, 0
end

-- scState returns the stored form of a sliding counter's state: the one
-- scLoad reads, with the limit as a fourth field when a count is beyond
-- it.
local function scState(k, cur, prev, limit)
  if cur > limit or prev > limit then
    return string.format('%d %d %d %d', k, cur, prev, limit)
  end
  return string.format('%d %d %d', k, cur, prev)
end
