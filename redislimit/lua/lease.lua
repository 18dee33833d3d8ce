-- lease.lua: in a lease script, placed between the state helpers and the
-- decision script (see scripts.go), it gives back the unused events of the key's previous
-- lease before the decision grants a new one, in the same round trip.
-- Its arguments are the last two of ARGV (after the previous policies):
-- the previous lease's grant time (Unix µs) and its unused events (0:
-- none). The give-back is the algorithm's refund script (<algorithm>/refund.lua,
-- which the assembler puts in place of the line --@refund), wrapped here in a
-- function, with n = the unused events and giveBackAt = the grant time
-- (see prelude.lua: a windowed policy takes the events back only from the
-- window that was charged, a bucket only what refill has not cancelled);
-- the decision that follows reads the state it left.
--@uses store
local leaseBackAt = tonumber(ARGV[#ARGV - 1])
local leaseBack = tonumber(ARGV[#ARGV])
if leaseBack and leaseBack > 0 then
  (function()
    giveBackAt = leaseBackAt
    local ARGV = {unpack(ARGV)}
    ARGV[2] = leaseBack
    --@refund
  end)()
  giveBackAt = nil
end
