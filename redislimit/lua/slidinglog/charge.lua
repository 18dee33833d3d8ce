-- slidinglog/charge.lua: the sliding log's side of converting state between
-- policies, in the scripts of a limiter with previous policies (chain.lua).
--@uses store

-- slCharged stores at key a log of u events at now: the state a previous
-- policy's usage converts to (chain.lua).
local function slCharged(key, now, u, w)
  redis.call('ZADD', key, 0, 'b', int(u), int(now))
  expire(key, w)
end
