-- settle.lua: the head of a settle script (Go: reserve.go), placed before
-- the algorithm's settle.lua: it reads and deletes the reservation's
-- record, KEYS[#KEYS] (see reserve.lua), and sets at (the decision time)
-- and d (the actual cost, ARGV[2], minus the estimate the record holds)
-- for the algorithm's arithmetic. A record that is gone (settled, or
-- expired and removed by its TTL), that is not one, or whose until has
-- come (expired on the script's time base) settles nothing: the script
-- returns -1 (ratelimit.ErrReservationSettled). d = 0 changes nothing
-- either (0). So a second run of one settle, as a retry after a lost
-- reply would be, finds no record: a reservation settles once.
--
-- Every settle script returns -1 (nothing to settle) or 0/1 (settled).
local recordKey = KEYS[#KEYS]
local record = redis.pcall('GET', recordKey)
if type(record) ~= 'string' then
  if type(record) == 'table' and record.err then
    redis.call('DEL', recordKey) -- another type: no record of ours
  end
  return -1
end
redis.call('DEL', recordKey)
local at, held, untilT = fields(record, 3)
if not at or held < 0 or now >= untilT then
  return -1
end
local d = tonumber(ARGV[2]) - held
if d == 0 then
  return 0
end
