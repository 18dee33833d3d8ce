-- Leaky bucket refund: lower the level by n events. Mirrors
-- leakyBucketAlg.refund. A lease's give-back (mode 'g<at>', or giveBackAt
-- in a lease script) lowers it only by what has not leaked since the
-- grant (see prelude.lua).
--
-- KEYS[1]  as in decide.lua
-- ARGV     now (µs or ""), n, capacity, every (µs), "r" or "g<at>", then the previous policies
--@uses store
local key = KEYS[1]
local n = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local every = tonumber(ARGV[4])
local backAt = giveBackAt or givenBackAt(ARGV[5])
if inherit then
  inherit(now, 6, capacity, 'r', function(u) lbCharged(key, now, u, every) end)
end
local empty = lbLoad(load(key), now, capacity * every)
if empty <= now then
  return 0
end
local back = n * every
if backAt then
  back = math.max(back - math.max(now - backAt, 0), 0)
  if back == 0 then
    return 0
  end
end
empty = empty - back
if empty <= now then
  redis.call('DEL', key)
else
  redis.call('SET', key, lbState(empty, now, capacity * every), 'PX', ttl(empty - now))
end
return 1
