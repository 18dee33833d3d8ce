-- prelude.lua is the head of every script of package redislimit: the time
-- of the decision and the constants the fast paths need. It defines no
-- function: a closure costs about as much Redis server time as a string.format,
-- and the fast paths (<algorithm>/fast.lua), placed right after it, make none.
--
-- Numbers are Lua doubles: integers are exact below 2^53, and every quantity
-- these scripts handle (Unix microseconds, scaled token units, counts times
-- window lengths) is validated in Go to stay below that. Time is in integer
-- microseconds throughout.

-- Scripts read TIME and then write: Redis 5+ replicates their effects, older
-- servers need to be asked to (the call is a no-op returning true on 7).
if redis.replicate_commands then redis.replicate_commands() end

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

-- loaded is the reply of a fast path's read of the client's state and block
-- key (MGET), when it read them and then left the decision to the general
-- path (<algorithm>/decide.lua reuses it instead of reading again); nil
-- otherwise.
local loaded
