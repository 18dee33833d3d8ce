-- settle.lua: placed before the algorithm's settle.lua in a settle
-- script (Go: reserve.go). takeRecord reads and deletes the reservation's
-- record, KEYS[#KEYS - 1] (see reserve.lua; KEYS[#KEYS] is the key's reset
-- marker, resetMarker in reserve.go), and returns at (the decision
-- time) and d (the actual cost, ARGV[2], minus the estimate the record
-- holds) for the algorithm's arithmetic; or nil and the script's reply: -1
-- (ratelimit.ErrReservationSettled) for a record that is gone (settled, or
-- expired and removed by its TTL), that is not one, or whose until has
-- come (expired on the script's time base), and 0 for d = 0; either way
-- nothing else changes. So a second run of one settle, as a retry after a
-- lost reply would be, finds no record: a reservation settles once. The
-- algorithm's part calls it after the checks that may fail the script, so
-- that a failed settle leaves the record to its expiry.
--
-- Every settle script returns -1 (nothing to settle) or 0/1 (settled).
local function takeRecord()
  local key = KEYS[#KEYS - 1]
  local record = redis.pcall('GET', key)
  if type(record) ~= 'string' then
    if type(record) == 'table' and record.err then
      redis.call('DEL', key) -- another type: no record of ours
    end
    return nil, -1
  end
  redis.call('DEL', key)
  local at, held, untilT = fields(record, 3)
  if not at or held < 0 or now >= untilT then
    return nil, -1
  end
  local actual, other = ARGV[2], false
  if string.sub(actual, -1) == '+' then
    actual, other = string.sub(actual, 1, -2), true
  end
  local d = tonumber(actual) - held
  if d < 0 then
    -- Made under another policy, or before a Reset of the key: what it
    -- was charged went with that state, so nothing is given back.
    local reset = num(redis.call('GET', KEYS[#KEYS]))
    if other or (reset and reset >= at) then
      d = 0
    end
  end
  if d == 0 then
    return nil, 0
  end
  return at, d
end
