-- concurrency/helpers.lua: what the concurrency scripts share. The state
-- of one client key is a sorted set (KEYS[1]) of the permits held: each
-- member is "<128-bit random id in hex> <n>", scored by its expiry in the
-- server's Unix milliseconds. The key expires with its last member.

-- nowMs is the server's time (prelude.lua's now) in whole milliseconds.
local nowMs = math.floor(now / 1000)

-- permitsOf returns the permits a member holds, or nil for a member this
-- package did not write.
local function permitsOf(member)
  local n = tonumber(string.match(member, '^%x+ (%d+)$'))
  if n == nil or n < 1 then
    return nil
  end
  return n
end

-- live drops the expired members (and anything this package did not
-- write) and returns the permits held by the others. A key of another
-- type is foreign: it is deleted, never an error that the failure policy
-- would turn into an admission.
local function live(key)
  local t = redis.call('TYPE', key)
  t = t.ok or t
  if t == 'none' then
    return 0
  end
  if t ~= 'zset' then
    redis.call('DEL', key)
    return 0
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', nowMs)
  local held = 0
  for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    local n = permitsOf(m)
    if n then
      held = held + n
    else
      redis.call('ZREM', key, m)
    end
  end
  return held
end

-- keepUntil makes the key live at least ttl ms from now.
local function keepUntil(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
