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

-- Every script's ARGV begins with now and n, then the policy's parameters
-- (the same positions in a decision script and its refund script), then, in
-- decision scripts, the commit flag.
--
-- clientNow is ARGV[1], the decision time the caller passed (Unix µs), or
-- nil for the Redis server's clock.
local clientNow = tonumber(ARGV[1])

-- slack is added to every TTL. With time passed in by the caller the Redis
-- server's clock, which runs the TTLs, is not the clock that decides: state
-- is then kept one minute past idle, so that callers whose clocks lag by up
-- to that much, or a paused test clock, still find it.
local slack = 0

-- now is the decision time in Unix microseconds: the caller's when it
-- passed one, the Redis server's clock otherwise. It is read once, before
-- anything else, so that every part of a script (a lease's give-back and
-- its grant) works at one instant.
local now
if clientNow then
  now, slack = clientNow, 60000000
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
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

-- Every script ends by returning {allowed (0/1), remaining, retryAfter µs,
-- resetAfter µs} (decisions) or 1/0 (refunds: whether state was changed).

-- Stored state is read as untrusted: garbage, another Redis type, a state
-- of another policy or one from far in the future must read as fresh state
-- (and be overwritten by the next write), never raise a script error (which
-- the failure policy would turn into an admission) and never lock a key out.

-- maxSkew bounds how far ahead of now stored state may lie and still be
-- honoured as a clock that stepped back a little (or, with client time, a
-- caller whose clock lags another's): the state then holds its quota, as it
-- would have. Beyond min(idle time of the policy, maxSkew) it is foreign or
-- forged, and read as fresh. One minute, the same as the client-time slack.
local maxSkew = 60000000

-- num parses a decimal integer as written by int(): digits with an optional
-- minus sign and no leading zero, exact (below 2^53 in magnitude). Anything
-- else gives nil. The check is a round trip: tonumber reads more than
-- int() writes (spaces, hex, exponents, "-0", leading zeros, digits past
-- 2^53), and int() of what it read gives back s only when s is as int()
-- writes it.
local function num(s)
  local x = tonumber(s)
  if x and x > -9007199254740992 and x < 9007199254740992 and string.format('%d', x) == s then
    return x
  end
  return nil
end

-- fields returns the integers of a stored state of exactly count (1, 2 or
-- 3) space-separated fields, or nil when v is not one: each as num reads
-- it, with one round trip for the whole state.
local function fields(v, count)
  if not v then
    return nil
  end
  if count == 1 then
    return num(v)
  elseif count == 2 then
    local a, b = string.match(v, '^(%-?%d+) (%-?%d+)$')
    if a then
      a, b = tonumber(a), tonumber(b)
      if a > -9007199254740992 and a < 9007199254740992 and b > -9007199254740992 and b < 9007199254740992
          and string.format('%d %d', a, b) == v then
        return a, b
      end
    end
    return nil
  end
  local a, b, c = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  if a then
    a, b, c = tonumber(a), tonumber(b), tonumber(c)
    if a > -9007199254740992 and a < 9007199254740992 and b > -9007199254740992 and b < 9007199254740992
        and c > -9007199254740992 and c < 9007199254740992 and string.format('%d %d %d', a, b, c) == v then
      return a, b, c
    end
  end
  return nil
end

-- unstored is set by inherit (chain.lua) when the script decides on the
-- conversion of the client's state under an earlier policy without storing
-- it (a Peek, or a blocked AllowN): that state is made anew, at each call's
-- now, until a decision stores it.
local unstored = false

-- giveBackAt is the grant time (Unix µs) of the lease whose unused events
-- a refund script gives back (lease.go), nil for a plain refund. In a
-- lease script lua/lease.lua sets it; a refund script run on its own
-- finds it in its mode argument, 'g<at>' (givenBackAt). A windowed policy
-- gives the events back at that time, into the window that was charged.
-- A bucket gives them back at now, less what refill has cancelled since:
-- n events charged at giveBackAt hold the level down by at most
-- max(0, n - refill x (now - giveBackAt)) at now (the bucket may have
-- been full meanwhile), and a give-back must never return more than the
-- lease still holds down.
local giveBackAt
