-- quota/charge.lua: the calendar quota's side of converting state between
-- policies, in the scripts of a limiter with previous policies (chain.lua).
--@uses store

-- qRemaining returns the remaining quota of a stored quota state of
-- another policy (whose boundaries are not passed): its count while its
-- period has not ended, the full limit otherwise or when the state is not
-- one.
local function qRemaining(key, now, limit)
  local st, en, c = fields(load(key), 3)
  if st and c >= 0 and c <= limit and en > st and en - st <= qMaxPeriod
      and st - now <= maxSkew and now < en then
    return limit - c
  end
  return limit
end

-- qCharged stores at key u events counted in the period [s, e) holding
-- now: the state a previous policy's usage converts to (chain.lua).
local function qCharged(key, now, u, s, e)
  redis.call('SET', key, int(s) .. ' ' .. int(e) .. ' ' .. int(u), 'PX', ttl(e - now))
end
