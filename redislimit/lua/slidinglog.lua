-- Sliding log decision. Mirrors slidingLogAlg.decide: at most max events in
-- any interval of length w; an entry is kept while ts > now - w.
--
-- KEYS[1]  list: [total, ts1, n1, ts2, n2, ...]: the number of events in the
--          log, then one (Unix µs, count) pair per entry, oldest first.
--          Events at the time of the newest entry, or earlier, merge into it,
--          so timestamps never decrease along the list and there is at most
--          one entry per microsecond: at most max entries, about 20 bytes each.
-- ARGV     now (µs or ""), n, commit (1/0), limit, window (µs)
local key = KEYS[1]
local now = clock()
local n = tonumber(ARGV[2])
local commit = ARGV[3] == '1'
local max = tonumber(ARGV[4])
local w = tonumber(ARGV[5])
local cutoff = now - w

local len = redis.call('LLEN', key)
local total = 0
local entries = 0
if len > 0 then
  total = tonumber(redis.call('LINDEX', key, 0))
  entries = (len - 1) / 2
end

-- Nothing is removed yet: a denial stores nothing.
local expired, expiredN = logExpired(key, entries, cutoff)
total = total - expiredN
entries = entries - expired

local backTS, backN = 0, 0
if entries > 0 then
  local back = redis.call('LRANGE', key, -2, -1)
  backTS, backN = tonumber(back[1]), tonumber(back[2])
end

local after = total + n
if after <= max then
  local reset = 0
  if after > 0 then
    local newest = now
    if entries > 0 and (n == 0 or backTS > now) then
      newest = backTS
    end
    reset = newest + w - now
  end
  if commit and n > 0 then
    if expired > 0 then
      -- Drop the header and the expired entries, then write a new header.
      redis.call('LTRIM', key, int(1 + 2 * expired), -1)
      redis.call('LPUSH', key, after)
    elseif len > 0 then
      redis.call('LSET', key, 0, after)
    else
      redis.call('RPUSH', key, after)
    end
    local newest = now
    if entries > 0 and now <= backTS then
      -- Late or simultaneous events merge into the newest entry.
      redis.call('LSET', key, -1, backN + n)
      newest = backTS
    else
      redis.call('RPUSH', key, now, n)
    end
    -- Idle once the newest entry is w old.
    expire(key, newest + w - now)
  end
  return {1, max - after, 0, reset}
end

-- Denied: find the entry whose expiry frees enough room for n.
local free = after - max
local ts = 0
local i = expired
local chunk = 16
while free > 0 do
  local first = 1 + 2 * i
  local items = redis.call('LRANGE', key, int(first), int(first + 2 * chunk - 1))
  if #items == 0 then
    break
  end
  for j = 1, #items, 2 do
    free = free - tonumber(items[j + 1])
    ts = tonumber(items[j])
    i = i + 1
    if free <= 0 then
      break
    end
  end
  chunk = chunk * 4
end
return {0, math.max(max - total, 0), ts + w - now, backTS + w - now}
