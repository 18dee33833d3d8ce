-- fixedwindow/charge.lua: the fixed window's side of converting state between
-- policies, in the scripts of a limiter with previous policies (chain.lua).
--@uses store

-- fwCharged stores at key u events counted in the window of now: the state
-- a previous policy's usage converts to (chain.lua).
local function fwCharged(key, now, u, w)
  local k = fdiv(now, w)
  redis.call('SET', key, int(k) .. ' ' .. int(u), 'PX', ttl((k + 1) * w - now))
end
