-- reserve.lua: in a reservation script (Go: reserve.go), placed between
-- decision.lua and the algorithm's decide.lua, which ends with finish: an
-- AllowN ('1') that admits also writes the reservation's record, so that
-- the decision and the record are one atomic step.
--
-- KEYS[#KEYS] is the record's key (the client's hash tag: the same slot
-- as its state), ARGV[#ARGV] the reservation's expiry in µs. The record
-- is "<at> <n> <until>": the decision time, the events charged, and the
-- time (at + expiry, on the script's time base) from which it counts as
-- settled at its estimate. Its TTL is the expiry (plus the client-time
-- slack): a record nobody settles goes away on its own.
local decisionFinish = finish
finish = function(n, mode, decide)
  local d = decisionFinish(n, mode, decide)
  if d[1] == 1 and mode == '1' and not blockEnd then
    local expiry = tonumber(ARGV[#ARGV])
    redis.call('SET', KEYS[#KEYS], string.format('%d %d %d', now, n, now + expiry), 'PX', ttl(expiry))
  end
  return d
end
