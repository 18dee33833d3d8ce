-- window.lua: shared by the fixed window and the sliding counter.

-- windowOK reports whether a stored window index storedK may be honoured
-- at now with windows of w µs: a past or current window, or the next one
-- when it starts within maxSkew (a clock that stepped back across a
-- boundary).
local function windowOK(storedK, now, w)
  local k = fdiv(now, w)
  return storedK <= k or (storedK == k + 1 and storedK * w - now <= maxSkew)
end
