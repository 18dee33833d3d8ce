-- tokenbucket/state.lua: the state helpers of the token bucket scripts, placed between
-- the prelude and each script.

-- tbLoad returns a token bucket's valid state "<last> <debt>" in v (the
-- key's value: a string, or nil or false for none), or the fresh state, a
-- full bucket at now: the debt must be within a full bucket, and last at
-- most min(refill time, maxSkew) ahead of now.
local function tbLoad(v, now, full, r)
  local last, debt = fields(v, 2)
  local most = full
  if not last then
    -- In debt beyond empty (a reservation's overrun): "<last> <debt>
    -- <full>", honoured for this bucket only (see maxOver).
    local f
    last, debt, f = fields(v, 3)
    if f ~= full then
      last = nil
    end
    most = maxOver
  end
  if last and debt >= 0 and debt <= most and (last <= now or last - now <= math.min(cdiv(full, r), maxSkew)) then
    return last, debt
  end
  return now, 0
end

-- tbState returns the stored form of a token bucket's state: the one
-- tbLoad reads, with full as a third field beyond a full bucket's debt.
local function tbState(last, debt, full)
  if debt > full then
    return string.format('%d %d %d', last, debt, full)
  end
  return string.format('%d %d', last, debt)
end

-- tbRefill returns a token bucket's last update and debt refilled up to now
-- at r units per microsecond; time that runs backwards refills nothing.
-- Mirrors tokenBucketAlg.advance.
local function tbRefill(last, debt, now, r)
  local e = now - last
  if e <= 0 then
    return last, debt
  end
  if debt > 0 then
    if e >= cdiv(debt, r) then
      debt = 0
    else
      debt = debt - e * r
    end
  end
  return now, debt
end
