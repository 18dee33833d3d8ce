-- leakybucket/state.lua: the state helpers of the leaky bucket scripts, placed between
-- the prelude and each script.

-- lbLoad returns, from v (the key's value: a string, or nil or false for
-- none), a leaky bucket's valid state (the time it is empty) at
-- key, or the fresh state, now (empty): its level may exceed span only by
-- what a clock that stepped back explains, min(span, maxSkew).
local function lbLoad(v, now, span)
  local empty = fields(v, 1)
  local most = span + math.min(span, maxSkew)
  if not empty then
    -- Filled beyond its capacity (a reservation's overrun): "<empty>
    -- <span>", honoured for this bucket only (see maxOver).
    local s
    empty, s = fields(v, 2)
    if s ~= span then
      empty = nil
    end
    most = maxOver
  end
  if empty and empty - now <= most then
    return empty
  end
  return now
end

-- lbState returns the stored form of a leaky bucket's state: the one
-- lbLoad reads, with span as a second field beyond a full bucket.
local function lbState(empty, now, span)
  if empty - now > span then
    return string.format('%d %d', empty, span)
  end
  return string.format('%d', empty)
end
