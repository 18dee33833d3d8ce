-- fw.lua: the state helpers of the fixed window scripts, between the prelude and
-- each script.

-- fwLoad returns a fixed window's valid state "<k> <count>" at key, or the
-- fresh 0, 0.
local function fwLoad(key, now, max, w)
  local sk, count = fields(load(key), 2)
  if sk and count >= 0 and count <= max and windowOK(sk, now, w) then
    return sk, count
  end
  return 0, 0
end
