-- nochain.lua: in the scripts of a limiter without previous policies,
-- there is never state to inherit.
local function inherit()
  return nil
end
