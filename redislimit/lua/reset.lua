-- Reset: forget the client's state under the current policy and every
-- previous one, and its block; and, when ARGV[2] is "m", leave the time of
-- the Reset (now) in the last key, the client's reset marker, for a day
-- (the longest a reservation is held): a reservation made before it gives
-- nothing back when it settles (settle.lua).
--
-- KEYS     the client's keys (the same hash tag: one slot), then the marker
-- ARGV     now (µs or ""), "m"
--@uses store
local last = #KEYS
if ARGV[2] == 'm' then
  last = last - 1
  redis.call('SET', KEYS[#KEYS], string.format('%d', now), 'PX', 86400000 + math.floor(slack / 1000))
end
for i = 1, last do
  unlink(KEYS[i])
end
return 1
