-- quota/charge.lua: the calendar quota's side of converting state between
-- policies, in the scripts of a limiter with previous policies (chain.lua).
--@uses store

-- qRemaining returns the remaining quota of a stored quota state of
-- another policy (whose boundaries are not passed): its count while its
-- period has not ended, the full limit otherwise or when the state is not
-- one.
local function qRemaining(key, now, limit)
  local v = load(key)
  local st, en, c = fields(v, 3)
  local most = limit
  if not st then
    local l
    st, en, c, l = fields(v, 4) -- beyond the limit (see qLoad)
    if l ~= limit then
      st = nil
    end
    most = maxOver
  end
  if st and c >= 0 and c <= most and en > st and en - st <= qMaxPeriod
      and st - now <= maxSkew and now < en then
    return math.max(limit - c, 0)
  end
  return limit
end

-- qCharged stores at key u events counted in the period [s, e) holding
-- now: the state a previous policy's usage converts to (chain.lua).
local function qCharged(key, now, u, s, e)
  redis.call('SET', key, int(s) .. ' ' .. int(e) .. ' ' .. int(u), 'PX', ttl(e - now))
end
