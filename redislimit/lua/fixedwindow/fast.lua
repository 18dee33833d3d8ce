-- fixedwindow/fast.lua: the common decision inline, before any helper is
-- made (see prelude.lua): an AllowN ('1') of a client without a block key
-- whose state is absent or in the form decide.lua writes with a positive
-- count. It decides as decide.lua does; anything else goes on to the
-- general path, which reuses this MGET (loaded). Divisions: see
-- tokenbucket/fast.lua.
if ARGV[5] == '1' then
  local key = KEYS[1]
  loaded = redis.call('MGET', key, KEYS[2])
  local v = loaded[1]
  local ok = not loaded[2]
  local limit = tonumber(ARGV[3])
  local w = tonumber(ARGV[4])
  local k = math.floor(now / w)
  local count = 0
  if ok and v then
    -- Digits without a sign or leading zero, as int() writes a positive
    -- integer; fwLoad's checks (windowOK).
    local a, b = string.match(v, '^([1-9]%d*) ([1-9]%d*)$')
    ok = a ~= nil
    if ok then
      a, b = tonumber(a), tonumber(b)
      if b <= limit and (a <= k or (a == k + 1 and a * w - now <= maxSkew)) then
        -- A past window counts nothing; a stored next window (time ran
        -- back, see decide.lua) leaves it to the general path.
        if a == k then
          count = b
        elseif a > k then
          ok = false
        end
      end
    end
  end
  if ok then
    local n = tonumber(ARGV[2])
    local untilEnd = (k + 1) * w - now
    if count + n <= limit then
      redis.call('SET', key, string.format('%d %d', k, count + n), 'PX',
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
