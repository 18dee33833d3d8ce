-- fixedwindow/state.lua: the state helpers of the fixed window scripts, placed between
-- the prelude and each script.
--@uses window

-- fwLoad returns, from v (the key's value: a string, or nil or false for
-- none), a fixed window's valid state "<k> <count>" at key, or the
-- fresh state: no events in the current window.
local function fwLoad(v, now, limit, w)
  local storedK, count = fields(v, 2)
  if storedK and count >= 0 and count <= limit and windowOK(storedK, now, w) then
    return storedK, count
  end
  return fdiv(now, w), 0
end
