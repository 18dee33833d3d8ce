-- tokenbucket/state.lua: the state helpers of the token bucket scripts, placed between
-- the prelude and each script.

-- tbLoad returns a token bucket's valid state "<last> <debt>" in v (the
-- key's value: a string, or nil or false for none), or the fresh state, a
-- full bucket at now: the debt must be within a full bucket, and last at
-- most min(refill time, maxSkew) ahead of now.
local function tbLoad(v, now, full, r)
  local last, debt = fields(v, 2)
  if last and debt >= 0 and debt <= full and (last <= now or last - now <= math.min(cdiv(full, r), maxSkew)) then
    return last, debt
  end
  return now, 0
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
