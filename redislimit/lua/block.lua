-- Block: deny every decision for the client until now + d, whatever its
-- state (see finish in the prelude); d <= 0 lifts the block.
--
-- KEYS[1]  the client's block key: string, the block's end (Unix µs)
-- ARGV     now (µs or ""), d (µs)
--@uses store
local d = tonumber(ARGV[2])
if d <= 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], int(now + d), 'PX', ttl(d))
return 1
