-- prelude.lua is prepended to every script of package redislimit.
--
-- Numbers are Lua doubles: integers are exact below 2^53, and every quantity
-- these scripts handle (Unix microseconds, scaled token units, counts times
-- window lengths) is validated in Go to stay below that. Time is in integer
-- microseconds throughout.

-- Scripts read TIME and then write: Redis 5+ replicates their effects, older
-- servers need to be asked to (the call is a no-op returning true on 7).
if redis.replicate_commands then redis.replicate_commands() end

-- fdiv returns floor(a/b) for exact integers a >= 0 and b > 0. The double
-- quotient a/b is rounded; its floor could only be one too large when the
-- exact quotient lies within half an ulp below an integer, which takes
-- a >= 2^53 (a = q*b - 1 needs q*b >= 2^53 for 1/b to vanish next to q).
-- The exact remainder check costs little and keeps the result right even
-- then, as long as q*b stays exact.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- cdiv returns ceil(a/b) for exact integers a >= 0 and b > 0.
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end

-- slack is added to every TTL. With time passed in by the caller (ARGV[1])
-- the Redis server's clock, which runs the TTLs, is not the clock that
-- decides: state is then kept one minute past idle, so that callers whose
-- clocks lag by up to that much, or a paused test clock, still find it.
local slack = 0

-- clock returns the decision time in Unix microseconds: ARGV[1] when the
-- caller passed one, the Redis server's clock otherwise.
local function clock()
  local now = tonumber(ARGV[1])
  if now then
    slack = 60000000
    return now
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- ttl returns the TTL in milliseconds for state that becomes idle in us
-- microseconds: rounded up, so that a key never vanishes before its state
-- is idle, plus the slack. It is formatted here because Redis 7.2+ turns
-- Lua numbers into strings with the shortest round-trip form, which for
-- round numbers such as 1e8 is exponent notation that PEXPIRE and SET PX
-- reject. (Stored state is read back with tonumber, which accepts both.)
local function ttl(us)
  return string.format('%d', math.max(cdiv(us + slack, 1000), 1))
end

-- int formats an integer argument that Redis must parse as an integer (a
-- list index), for the same reason.
local function int(x)
  return string.format('%d', x)
end

-- expire sets key to expire once its state is idle, us microseconds from now.
local function expire(key, us)
  redis.call('PEXPIRE', key, ttl(us))
end

-- Every script ends by returning {allowed (0/1), remaining, retryAfter µs,
-- resetAfter µs} (decisions) or 1/0 (refunds: whether state was changed).

-- fields returns the numbers of a stored state "<a> <b>" or "<a> <b> <c>",
-- in order. Plain finds, not a gmatch into a table: no table per decision.
local function fields(v)
  local a = string.find(v, ' ', 1, true)
  local b = string.find(v, ' ', a + 1, true)
  if not b then
    return tonumber(string.sub(v, 1, a - 1)), tonumber(string.sub(v, a + 1))
  end
  return tonumber(string.sub(v, 1, a - 1)), tonumber(string.sub(v, a + 1, b - 1)), tonumber(string.sub(v, b + 1))
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

-- logExpired counts the entries at the front of a sliding log list that are
-- expired (ts <= cutoff), and their events, reading in growing chunks. It
-- removes nothing: a denial stores nothing.
local function logExpired(key, entries, cutoff)
  local expired, expiredN = 0, 0
  local chunk = 1
  while expired < entries do
    local first = 1 + 2 * expired
    local items = redis.call('LRANGE', key, int(first), int(first + 2 * chunk - 1))
    local live = #items == 0
    for j = 1, #items, 2 do
      if tonumber(items[j]) > cutoff then
        live = true
        break
      end
      expired = expired + 1
      expiredN = expiredN + tonumber(items[j + 1])
    end
    if live then
      break
    end
    chunk = chunk * 4
  end
  return expired, expiredN
end
