-- quota/fast.lua: the common decision inline, before any helper is made
-- (see prelude.lua): an AllowN ('1') of a client without a block key
-- whose state is absent or in the form decide.lua writes with a positive
-- count, at a now inside the passed periods. It decides as decide.lua
-- does; anything else goes on to the general path, which reuses this MGET
-- (loaded).
if ARGV[9] == '1' then
  local key = KEYS[1]
  loaded = redis.call('MGET', key, KEYS[2])
  local v = loaded[1]
  local ok = not loaded[2]
  local limit = tonumber(ARGV[3])
  -- qPeriod: the passed period [s, e) that holds now.
  local s, e
  for i = 4, 7 do
    local b = tonumber(ARGV[i + 1])
    if now < b then
      s, e = tonumber(ARGV[i]), b
      break
    end
  end
  ok = ok and s ~= nil and s <= now
  local st, en, count = s, e, 0
  if ok and v then
    -- Digits without a sign or leading zero, as int() writes a positive
    -- integer; qLoad's checks.
    local a, b, c = string.match(v, '^([1-9]%d*) ([1-9]%d*) ([1-9]%d*)$')
    ok = a ~= nil
    if ok then
      a, b, c = tonumber(a), tonumber(b), tonumber(c)
      if c <= limit and a < b and b - a <= math.min(2 * (e - s), 31708800000000) and a - now <= maxSkew and now < b then
        -- A stored period that starts after now (time ran back) leaves
        -- it to the general path.
        st, en, count, ok = a, b, c, a <= now
      end
    end
  end
  if ok then
    local n = tonumber(ARGV[2])
    local untilEnd = en - now
    if count + n <= limit then
      redis.call('SET', key, string.format('%d %d %d', st, en, count + n), 'PX',
        string.format('%d', math.max(-math.floor(-(untilEnd + slack) / 1000), 1)))
      local reset = 0
      if count + n > 0 then
        reset = untilEnd
      end
      return {1, limit - count - n, 0, reset}
    end
    return {0, math.max(limit - count, 0), untilEnd, untilEnd}
  end
end
