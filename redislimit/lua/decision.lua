-- decision.lua: the modes, blocks and replies of the decision scripts,
-- placed right before the algorithm's decide.lua (in lease scripts too).
--
-- A decision script reads the client's state and its block key (KEYS[2])
-- with one MGET where the state is a string (every algorithm but the
-- sliding log), then calls decisionMode with the block key's value, and
-- ends with finish.

-- maxBlock is the longest block, 100 years in µs (ratelimit's maxPeriod).
local maxBlock = 3153600000000000

-- blockEnd is the end of the block in force on the client, for an AllowN
-- or a Peek that the block answers (see decisionMode); nil otherwise.
local blockEnd

-- Lease grants (Go: lease.go) run a decision script in mode 'l<m>': n is
-- the lease wanted, k, and m the events the caller needs now. leaseMin is
-- m; leaseEnd, set by the windowed scripts (fixed window, sliding counter,
-- quota), is the end (Unix µs) of the window the grant is charged in, which
-- the lease must not outlive; the buckets leave it nil.
local leaseMin
local leaseEnd

-- decisionMode returns the mode a decision script runs in at now, given
-- its mode argument and the value of the client's block key (a string
-- holding the block's end in Unix µs, or false: none, or not a string). A
-- block in force answers AllowN ('1') and Peek ('0') with a denial
-- computed on a Peek(0) of the key's state: a blocked AllowN runs as a
-- Peek, so that it stores nothing, not even the conversion of the key's
-- state under an earlier policy (as in memory, where the conversion then
-- happens at the first decision after the block). A block value that is
-- garbage or ends beyond now + maxBlock is no block (and never an error).
local function decisionMode(mode, block)
  if mode ~= '1' and string.sub(mode, 1, 1) == 'l' then
    leaseMin = tonumber(string.sub(mode, 2))
    mode = 'l'
  end
  if block and (mode == '1' or mode == '0' or mode == 'l') then
    local untilT = num(block)
    if untilT and untilT > now and untilT - now <= maxBlock then
      blockEnd = untilT
      return '0'
    end
  end
  return mode
end

-- finish ends a decision script: decide(n, commit) decides n events on the
-- state the script loaded (committing when asked) and returns the
-- script's reply. A block in force (blockEnd) answers with a denial until
-- its end; a penalty charges what the state has left, up to n.
local function finish(n, mode, decide)
  if mode == '1' and not blockEnd then
    return decide(n, true) -- the common case first
  end
  if mode == 'l' then
    -- A lease: charge k = n events as an AllowN of k would; when k does
    -- not fit, charge what remains if that covers leaseMin (a partial
    -- lease), else answer the exact denial of leaseMin. The reply adds
    -- the events granted, the script's now and leaseEnd (-1: none).
    local d = decide(n, true)
    local got = n
    if d[1] ~= 1 then
      got = decide(0, false)[2]
      if got >= leaseMin then
        d = decide(got, true)
      end
      -- Too little remains, or what remains did not fit after all: grant
      -- nothing.
      if got < leaseMin or d[1] ~= 1 then
        d = decide(leaseMin, false)
        return {0, d[2], d[3], d[4], 0, now, -1}
      end
    end
    return {1, d[2], 0, d[4], got, now, leaseEnd or -1}
  end
  if mode == 'p' then
    local m = math.min(n, decide(0, false)[2])
    if m > 0 then
      decide(m, true)
    end
    return {1, 0, 0, 0}
  end
  if blockEnd then
    -- A denial that the caller may remember until its RetryAfter (0), or
    -- (2) one whose ResetAfter comes from an unstored conversion: not
    -- shorter a moment later, as a remembered one would be.
    local wait = blockEnd - now
    local denied = 0
    if unstored then
      denied = 2
    end
    local reply = {denied, 0, wait, math.max(wait, decide(0, false)[4])}
    if leaseMin then
      reply[5], reply[6], reply[7] = 0, now, -1
    end
    return reply
  end
  return decide(n, mode == '1')
end
