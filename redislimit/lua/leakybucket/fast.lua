-- leakybucket/fast.lua: the common decision inline, before any helper is
-- made (see prelude.lua): an AllowN ('1') of a client without a block key
-- whose state is absent or in the form decide.lua writes. It decides as
-- decide.lua does; anything else goes on to the general path, which
-- reuses this MGET (loaded). Divisions: see tokenbucket/fast.lua.
if ARGV[5] == '1' then
  local key = KEYS[1]
  loaded = redis.call('MGET', key, KEYS[2])
  local v = loaded[1]
  local ok = not loaded[2]
  local every = tonumber(ARGV[4])
  local span = tonumber(ARGV[3]) * every
  local empty = now
  if ok and v then
    -- Digits without a sign or leading zero, as int() writes a positive
    -- integer; lbLoad's check.
    ok = string.find(v, '^[1-9]%d*$') ~= nil
    if ok then
      local x = tonumber(v)
      if x < 9007199254740992 and x - now <= span + math.min(span, maxSkew) then
        empty = x
      end
    end
  end
  if ok then
    local level = math.max(empty - now, 0)
    local need = tonumber(ARGV[2]) * every
    if level + need <= span then
      redis.call('SET', key, string.format('%d', now + level + need), 'PX',
        string.format('%d', math.max(-math.floor(-(level + need + slack) / 1000), 1)))
      return {1, math.floor((span - level - need) / every), 0, level + need}
    end
    return {0, math.floor(math.max(span - level, 0) / every), level + need - span, level}
  end
end
