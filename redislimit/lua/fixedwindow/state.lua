-- fixedwindow/state.lua: the state helpers of the fixed window scripts, placed between
-- the prelude and each script.
--@uses window

-- fwLoad returns, from v (the key's value: a string, or nil or false for
-- none), a fixed window's valid state "<k> <count>" at key, or the
-- fresh state: no events in the current window.
local function fwLoad(v, now, limit, w)
  local storedK, count = fields(v, 2)
  local most = limit
  if not storedK then
    -- Counted beyond the limit (a reservation's overrun): "<k> <count>
    -- <limit>", honoured for this limit only (see maxOver).
    local l
    storedK, count, l = fields(v, 3)
    if l ~= limit then
      storedK = nil
    end
    most = maxOver
  end
  if storedK and count >= 0 and count <= most and windowOK(storedK, now, w) then
    return storedK, count
  end
  return fdiv(now, w), 0
end

-- fwState returns the stored form of a fixed window's state: the one
-- fwLoad reads, with the limit as a third field beyond it.
local function fwState(k, count, limit)
  if count > limit then
    return string.format('%d %d %d', k, count, limit)
  end
  return string.format('%d %d', k, count)
end
