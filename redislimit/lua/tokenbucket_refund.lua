-- Token bucket refund: refill up to now, then give back n tokens, never
-- above a full bucket. Mirrors tokenBucketAlg.refund.
--
-- KEYS[1]  as in tokenbucket.lua
-- ARGV     now (µs or ""), n, capacity, r, p
local key = KEYS[1]
local st = redis.call('HMGET', key, 'l', 'd')
if not st[1] then
  return 0
end
local now = clock()
local n = tonumber(ARGV[2])
local r = tonumber(ARGV[4])
local p = tonumber(ARGV[5])
local last = tonumber(st[1])
local debt = tonumber(st[2]) or 0

local e = now - last
if e > 0 then
  last = now
  if debt > 0 then
    if e >= cdiv(debt, r) then
      debt = 0
    else
      debt = debt - e * r
    end
  end
end

debt = math.max(debt - n * p, 0)
if debt == 0 then
  redis.call('DEL', key)
else
  redis.call('HSET', key, 'l', last, 'd', debt)
  expire(key, last + cdiv(debt, r) - now)
end
return 1
