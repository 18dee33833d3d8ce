-- tokenbucket/charge.lua: the token bucket's side of converting state between
-- policies, in the scripts of a limiter with previous policies (chain.lua).
--@uses store

-- tbCharged stores at key a full bucket charged u events at now: the state
-- a previous policy's usage converts to (chain.lua).
local function tbCharged(key, now, u, p, r)
  redis.call('SET', key, int(now) .. ' ' .. int(u * p), 'PX', ttl(cdiv(u * p, r)))
end
