-- lease.lua: in a lease script, placed between the state helpers and the
-- decision script, it gives back the unused events of the key's previous
-- lease before the decision grants a new one, in the same round trip.
-- Its arguments are the last two of ARGV (after the previous policies):
-- the previous lease's grant time (Unix µs) and its unused events (0:
-- none). The give-back is the algorithm's refund script, wrapped here in a
-- function that runs at that grant time (so a windowed policy takes the
-- events back only from the window that was charged) with n = the unused
-- events; the decision that follows reads the state it left.
local leaseBackAt = tonumber(ARGV[#ARGV - 1])
local leaseBack = tonumber(ARGV[#ARGV])
if leaseBack and leaseBack > 0 then
  (function()
    local function clock()
      return leaseBackAt
    end
    local ARGV = {unpack(ARGV)}
    ARGV[2] = leaseBack
