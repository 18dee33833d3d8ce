-- Fixed window refund: take n events back from the current window if it is
-- the one that holds them. Mirrors fixedWindowAlg.refund.
--
-- KEYS[1]  as in fixedwindow.lua
-- ARGV     now (µs or ""), n, limit, window (µs)
local key = KEYS[1]
local st = redis.call('HMGET', key, 'k', 'c')
if not st[1] then
  return 0
end
local now = clock()
local w = tonumber(ARGV[4])
if fdiv(now, w) ~= tonumber(st[1]) then
  return 0
end
local count = math.max((tonumber(st[2]) or 0) - tonumber(ARGV[2]), 0)
if count == 0 then
  redis.call('DEL', key)
else
  redis.call('HSET', key, 'c', count)
end
return 1
