-- leakybucket/charge.lua: the leaky bucket's side of converting state between
-- policies, in the scripts of a limiter with previous policies (chain.lua).
--@uses store

-- lbCharged stores at key an empty bucket charged u events at now: the
-- state a previous policy's usage converts to (chain.lua).
local function lbCharged(key, now, u, every)
  redis.call('SET', key, int(now + u * every), 'PX', ttl(u * every))
end
