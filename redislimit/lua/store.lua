-- store.lua: the helpers of the scripts that write more than one
-- decision's state: refunds, conversions between policies (chain.lua and
-- <algorithm>/charge.lua), the sliding log, leases and the admin scripts.
-- A part that needs them says "--@uses store" (see assemble in scripts.go);
-- the decision scripts of the other algorithms go without, and make fewer
-- closures per run.

-- int formats an integer argument that Redis must parse as an integer (a
-- list index), for the same reason.
local function int(x)
  return string.format('%d', x)
end

-- expire sets key to expire once its state is idle, us microseconds from now.
local function expire(key, us)
  redis.call('PEXPIRE', key, ttl(us))
end

-- unlink deletes key, off Redis's main thread where the server can
-- (UNLINK, Redis 4+: a sliding log may hold many entries).
local function unlink(key)
  local r = redis.pcall('UNLINK', key)
  if type(r) == 'table' then
    redis.call('DEL', key)
  end
end

-- load returns the string stored at key, or nil when there is none or the
-- key holds another type (SET replaces any type, so the next write repairs
-- it).
local function load(key)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then
    return nil
  end
  return v
end

-- Modes of a decision script (its mode argument, after the policy's
-- parameters): '1' AllowN (consume if admitted), '0' Peek, 'x' AllowN of an
-- n that can never be admitted (the usual RetryNever denial, which a block
-- does not change; like any AllowN it converts and stores the key's state
-- under an earlier policy), 'n' the same for Peek (stores nothing), 'p'
-- Penalize (charge min(n, remaining) without a decision, whatever a block
-- says). Refund scripts pass 'r'.
local function writes(mode)
  return mode == '1' or mode == 'x' or mode == 'p' or mode == 'r' or mode == 'l'
end

-- givenBackAt returns the grant time in a refund's mode argument 'g<at>'
-- (a lease's give-back), nil for 'r'.
local function givenBackAt(mode)
  if mode and string.sub(mode, 1, 1) == 'g' then
    return num(string.sub(mode, 2))
  end
  return nil
end
