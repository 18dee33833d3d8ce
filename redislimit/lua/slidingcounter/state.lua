-- slidingcounter/state.lua: the state helpers of the sliding counter scripts, placed between
-- the prelude and each script.
--@uses window

-- scLoad returns, from v (the key's value: a string, or nil or false for
-- none), a sliding counter's valid state "<k> <cur> <prev>" at key
-- (the index of the newest window counted, its count and the previous
-- window's count), or the fresh state: no events in this window or the
-- previous.
local function scLoad(v, now, limit, w)
  local storedK, storedCur, storedPrev = fields(v, 3)
  if storedK and storedCur >= 0 and storedCur <= limit and storedPrev >= 0 and storedPrev <= limit
      and windowOK(storedK, now, w) then
    return storedK, storedCur, storedPrev
  end
  return fdiv(now, w), 0, 0
end
