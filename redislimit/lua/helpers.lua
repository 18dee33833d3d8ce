-- helpers.lua: the arithmetic and parsing helpers of every script, placed
-- after the prelude (and after a fast path, which returns before they are
-- made: each is a closure made anew at every run).

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

-- ttl returns the TTL in milliseconds for state that becomes idle in us
-- microseconds: rounded up, so that a key never vanishes before its state
-- is idle, plus the slack. It is formatted here because Redis 7.2+ turns
-- Lua numbers into strings with the shortest round-trip form, which for
-- round numbers such as 1e8 is exponent notation that PEXPIRE and SET PX
-- reject. (Stored state is read back with tonumber, which accepts both.)
local function ttl(us)
  return string.format('%d', math.max(cdiv(us + slack, 1000), 1))
end

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

-- fields returns the integers of a stored state of exactly count (1 to
-- 4) space-separated fields, or nil when v is not one: each as num reads
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
  if count == 4 then
    local a, b, c, d = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
    if a then
      a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
      if a > -9007199254740992 and a < 9007199254740992 and b > -9007199254740992 and b < 9007199254740992
          and c > -9007199254740992 and c < 9007199254740992 and d > -9007199254740992 and d < 9007199254740992
          and string.format('%d %d %d %d', a, b, c, d) == v then
        return a, b, c, d
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

-- maxOver (2^52, Go's maxState) bounds the state a reservation's overrun
-- (settle.lua) may leave beyond the policy's limit: a bucket's debt in
-- units, a leaky bucket's level in µs, a window's count. Such state is
-- stored in a form of its own, with the policy's limit (a bucket's full
-- units, a leaky bucket's span) as an extra field: it is honoured only
-- under that policy, so that another policy's state, or garbage, beyond
-- the limit still reads as fresh and locks no key out; within the limit
-- a state keeps the form the fast paths read.
local maxOver = 4503599627370496

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
