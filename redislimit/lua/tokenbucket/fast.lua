-- tokenbucket/fast.lua: the common decision inline, before any helper is
-- made (see prelude.lua): an AllowN ('1') of a client without a block key
-- whose state is absent or in the form decide.lua writes with both fields
-- positive. It decides as decide.lua does; anything else (another mode, a
-- block key, any other stored value) goes on to the general path, which
-- reuses this MGET (loaded).
--
-- Divisions are math.floor of the double quotient: every operand here is
-- an integer below 2^53 (Go validates the policy's numbers, the parse
-- below the stored ones), where the floor or ceiling of the rounded
-- quotient is the exact one (see fdiv in helpers.lua).
if ARGV[6] == '1' then
  local key = KEYS[1]
  loaded = redis.call('MGET', key, KEYS[2])
  local v = loaded[1]
  local ok = not loaded[2]
  local p = tonumber(ARGV[5])
  local full = tonumber(ARGV[3]) * p
  local r = tonumber(ARGV[4])
  local last, debt = now, 0
  if ok and v then
    -- Digits without a sign or leading zero, as int() writes a positive
    -- integer; tbLoad's checks, under which b <= full keeps b exact.
    local a, b = string.match(v, '^([1-9]%d*) ([1-9]%d*)$')
    ok = a ~= nil
    if ok then
      a, b = tonumber(a), tonumber(b)
      if a < 9007199254740992 and b <= full and (a <= now or a - now <= math.min(-math.floor(-full / r), maxSkew)) then
        last, debt = a, b
      end
    end
  end
  if ok then
    -- tbRefill
    local e = now - last
    if e > 0 then
      if debt > 0 then
        if e >= -math.floor(-debt / r) then
          debt = 0
        else
          debt = debt - e * r
        end
      end
      last = now
    end
    local need = tonumber(ARGV[2]) * p
    local avail = full - debt
    if avail >= need then
      local nd = debt + need
      local toFull = -math.floor(-nd / r)
      redis.call('SET', key, string.format('%d %d', last, nd), 'PX',
        string.format('%d', math.max(-math.floor(-(last + toFull - now + slack) / 1000), 1)))
      return {1, math.floor((avail - need) / p), 0, toFull}
    end
    return {0, math.floor(math.max(avail, 0) / p), -math.floor(-(need - avail) / r), -math.floor(-debt / r)}
  end
end
