-- leakybucket/state.lua: the state helpers of the leaky bucket scripts, placed between
-- the prelude and each script.

-- lbLoad returns, from v (the key's value: a string, or nil or false for
-- none), a leaky bucket's valid state (the time it is empty) at
-- key, or the fresh state, now (empty): its level may exceed span only by
-- what a clock that stepped back explains, min(span, maxSkew).
local function lbLoad(v, now, span)
  local empty = fields(v, 1)
  if empty and empty - now <= span + math.min(span, maxSkew) then
    return empty
  end
  return now
end
