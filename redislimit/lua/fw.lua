-- fw.lua: the state helpers of the fixed window scripts, placed between
-- the prelude and each script.

-- fwLoad returns a fixed window's valid state "<k> <count>" at key, or the
-- fresh state: no events in the current window.
local function fwLoad(key, now, max, w)
  local sk, count = fields(load(key), 2)
  if sk and count >= 0 and count <= max and windowOK(sk, now, w) then
    return sk, count
  end
  return fdiv(now, w), 0
end
