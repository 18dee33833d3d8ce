-- slidingcounter/charge.lua: the sliding counter's side of converting state between
-- policies, in the scripts of a limiter with previous policies (chain.lua).
--@uses store

-- scCharged stores at key u events counted in the window of now and none
-- in the previous: the state a previous policy's usage converts to
-- (chain.lua).
local function scCharged(key, now, u, w)
  local k = fdiv(now, w)
  redis.call('SET', key, int(k) .. ' ' .. int(u) .. ' 0', 'PX', ttl((k + 2) * w - now))
end
