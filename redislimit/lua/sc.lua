-- sc.lua: the state helpers of the sliding counter scripts, placed between
-- the prelude and each script.

-- scLoad returns a sliding counter's valid state "<k> <cur> <prev>" at key,
-- or the fresh state: no events in this window or the previous.
local function scLoad(key, now, max, w)
  local sk, sc, sp = fields(load(key), 3)
  if sk and sc >= 0 and sc <= max and sp >= 0 and sp <= max and windowOK(sk, now, w) then
    return sk, sc, sp
  end
  return fdiv(now, w), 0, 0
end
