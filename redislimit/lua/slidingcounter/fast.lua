-- slidingcounter/fast.lua: the common admission inline, before any helper
-- is made (see prelude.lua): an AllowN ('1') of a client without a block
-- key whose state is absent or in the form decide.lua writes with a
-- positive current count, admitted. It decides as decide.lua does;
-- anything else (a denial too) goes on to the general path, which reuses
-- this MGET (loaded). Divisions: see tokenbucket/fast.lua.
if ARGV[5] == '1' then
  local key = KEYS[1]
  loaded = redis.call('MGET', key, KEYS[2])
  local v = loaded[1]
  local ok = not loaded[2]
  local limit = tonumber(ARGV[3])
  local w = tonumber(ARGV[4])
  local k = math.floor(now / w)
  local cur, prev = 0, 0
  if ok and v then
    -- Digits without a sign or leading zero, as int() writes an integer
    -- (positive, but for the previous count); scLoad's checks (windowOK).
    local a, b, c = string.match(v, '^([1-9]%d*) ([1-9]%d*) (%d+)$')
    ok = a ~= nil and (c == '0' or string.byte(c) ~= 48)
    if ok then
      a, b, c = tonumber(a), tonumber(b), tonumber(c)
      if b <= limit and c <= limit and (a <= k or (a == k + 1 and a * w - now <= maxSkew)) then
        -- Older windows count nothing; a stored next window (time ran
        -- back) leaves it to the general path.
        if a == k then
          cur, prev = b, c
        elseif a == k - 1 then
          prev = b
        elseif a > k then
          ok = false
        end
      end
    end
  end
  if ok then
    local n = tonumber(ARGV[2])
    local e = now - k * w
    local rem = limit - cur + math.floor(-prev * (w - e) / w)
    if n <= rem then
      redis.call('SET', key, string.format('%d %d %d', k, cur + n, prev), 'PX',
        string.format('%d', math.max(-math.floor(-((k + 2) * w - now + slack) / 1000), 1)))
      local reset = 0
      if cur + n > 0 then
        reset = 2 * w - e
      elseif prev > 0 then
        reset = w - e
      end
      return {1, rem - n, 0, reset}
    end
  end
end
