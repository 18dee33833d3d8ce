-- chain.lua: inheriting state from previous policies (SetPolicy,
-- WithPrevious), placed after every algorithm's helpers in the scripts of
-- a limiter that has previous policies.
--
-- ARGV[at] is the number m of previous policies (1 to 4: Go keeps no
-- more, see keptPolicies), then m tuples of five,
-- newest first: code (tb, lb, fw, sl, sc, cq), the mode of the change from
-- this policy to the next newer one (k keep, s scale, f fresh), limit and
-- two parameters (tb: r, p; lb: every; fw, sl, sc: window; cq: none).
-- KEYS[3..2+m] are the keys of the client under them, in the same order:
-- the same hash tag as KEYS[1], so the same slot. After the tuples, the
-- current policy's code and two parameters.
--@uses store

-- mulDivUp returns ceil(a*b/c) exactly for integers 0 <= a <= c <= 2^52
-- and 0 <= b < 2^53: long multiplication over the bits of b, keeping
-- a*(b's bits so far) = q*c + r with r < c, so nothing exceeds 2^53.
local function mulDivUp(a, b, c)
  if a == 0 or b == 0 then
    return 0
  end
  if a * b < 9007199254740992 then
    return cdiv(a * b, c)
  end
  local bits, x = {}, b
  while x > 0 do
    local h = fdiv(x, 2)
    bits[#bits + 1] = x - 2 * h
    x = h
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q, r = 2 * q, 2 * r
    if r >= c then
      q, r = q + 1, r - c
    end
    if bits[i] == 1 then
      r = r + a
      while r >= c do
        q, r = q + 1, r - c
      end
    end
  end
  if r > 0 then
    q = q + 1
  end
  return q
end

-- remainingOf returns the quota a Peek(0) would report for the state at
-- key under a previous policy (code, limit, x, y), at now, writing nothing.
-- A state that is not one of that policy reads as fresh: the full limit.
local function remainingOf(code, key, now, limit, x, y)
  if code == 'tb' then
    local full = limit * y
    local last, debt = tbLoad(load(key), now, full, x)
    last, debt = tbRefill(last, debt, now, x)
    return fdiv(math.max(full - debt, 0), y)
  elseif code == 'lb' then
    local span = limit * x
    local level = math.max(lbLoad(load(key), now, span) - now, 0)
    return fdiv(math.max(span - level, 0), x)
  elseif code == 'fw' then
    local k, count = fwLoad(load(key), now, limit, x)
    if fdiv(now, x) > k then
      count = 0
    end
    return math.max(limit - count, 0)
  elseif code == 'sl' then
    local base, _, _, cum = slLoad(key, now, limit, x)
    return limit - (cum - base)
  elseif code == 'sc' then
    local storedK, cur, prev = scLoad(load(key), now, limit, x)
    local k = fdiv(now, x)
    local e = now - k * x
    if k == storedK + 1 then
      cur, prev = 0, cur
    elseif k > storedK + 1 then
      cur, prev = 0, 0
    elseif k < storedK then
      e = 0
    end
    return math.max(limit - cur - cdiv(prev * (x - e), x), 0)
  elseif code == 'cq' then
    return qRemaining(key, now, limit)
  end
  return limit
end

-- inherit converts the client's state under a previous policy when it has
-- none under the current one (KEYS[1]): u = the old limit minus the old
-- remaining quota at now, then each later change's mode in turn (keep:
-- min(u, next limit); scale: ceil(u * next / previous); fresh: 0). It
-- returns u, or nil when there is nothing to inherit. When mode writes,
-- charge(u) stores the current policy's fresh state charged u and the old
-- keys are deleted; otherwise (a Peek) nothing is stored and the caller
-- applies u to the fresh state it loaded.
local function inherit(now, at, limit, mode, charge)
  local m = tonumber(ARGV[at])
  if not m or m < 1 then
    return nil
  end
  -- The client's state under the current policy is its own, unless it has
  -- used nothing: then it may be a key left over, idle, from before a
  -- previous policy of the same name was forgotten (see below), and a
  -- previous policy's state goes first, as in memory.
  -- (remainingOf reads a missing key as fresh: nothing used.)
  local c = at + 1 + m * 5
  if limit - remainingOf(ARGV[c], KEYS[1], now, limit, tonumber(ARGV[c + 1]), tonumber(ARGV[c + 2])) > 0 then
    return nil
  end
  -- The newest previous policy whose state has used something is the one
  -- to convert: a conversion deletes the client's keys under every
  -- previous policy, so at most one holds used quota, except for a key
  -- left over, idle, from before a previous policy with the same name was
  -- forgotten (its name is used again: see salted in reconfig.go), which
  -- must not hide the state under an older one. States that have used
  -- nothing convert to nothing: u = 0.
  -- One EXISTS over them all first, so that a decision's commands do not
  -- depend on m (at most keptPolicies, see reconfig.go): most clients have
  -- no state under any previous policy.
  if redis.call('EXISTS', unpack(KEYS, 3, 2 + m)) == 0 then
    return nil
  end
  local u
  for i = 1, m do
    local key = KEYS[2 + i]
    local j = at + 1 + (i - 1) * 5
    local lim = tonumber(ARGV[j + 2])
    local used = 0
    if redis.call('EXISTS', key) == 1 then
      u = 0
      used = lim - remainingOf(ARGV[j], key, now, lim, tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]))
    end
    if used > 0 then
      u = used
      for g = i, 1, -1 do
        local jg = at + 1 + (g - 1) * 5
        local md, lp, ln = ARGV[jg + 1], tonumber(ARGV[jg + 2]), limit
        if g > 1 then
          ln = tonumber(ARGV[jg - 3])
        end
        if md == 'k' then
          u = math.min(u, ln)
        elseif md == 's' then
          u = mulDivUp(u, ln, lp)
        else
          u = 0
        end
      end
      break
    end
  end
  if u == nil then
    return nil
  end
  unstored = not writes(mode)
  if writes(mode) then
    local old = {unpack(KEYS, 3, 2 + m)}
    if type(redis.pcall('UNLINK', unpack(old))) == 'table' then
      redis.call('DEL', unpack(old))
    end
    if u > 0 then
      unlink(KEYS[1])
      charge(u)
    end
  end
  return u
end
