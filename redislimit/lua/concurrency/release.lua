-- Release member's permits: only that member, once (a second release, or
-- one of an expired member, removes nothing).
--
-- KEYS[1] the client's permits (concurrency/helpers.lua)
-- ARGV    "" (the server's time), count (1: also return what is held),
--         member
-- returns {removed (0/1), permits held after (-1 unless counted)}
--@uses concurrency/helpers
local key, count, member = KEYS[1], ARGV[2], ARGV[3]
local removed = redis.call('ZREM', key, member)
local held = -1
if count == '1' then
  held = live(key)
end
return {removed, held}
