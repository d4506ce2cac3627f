-- target_admit.lua: asks to start up to n syncs against the target, in
-- one call: the breaker (open: none, but for one probe per probe
-- interval, fleet-wide), the permits of max_in_flight, then the rate
-- limit (GCRA, as github.com/go-redis/redis_rate computes it, in ms).
-- Permits are taken last, for what all three allow. The caller may hold
-- some permits and rate tokens for these syncs already (kept from syncs
-- that ended, taken ahead): only the rest are taken here.
-- KEYS[1]  the breaker's state HASH
-- KEYS[2]  permits ZSET: member = permit name, score = expiry (ms)
-- KEYS[3]  the rate limit's theoretical arrival time (ms, a STRING)
-- ARGV[1]  n          how many syncs the caller could start
-- ARGV[2]  breaker    1: honour the breaker
-- ARGV[3]  probe_ms   the probe interval
-- ARGV[4]  cap_ms     the longest a breaker may stay open without a probe
-- ARGV[5]  max        max_in_flight; 0: no cap
-- ARGV[6]  ttl_ms     a permit's lease
-- ARGV[7]  base       permit names are base .. ':' .. i
-- ARGV[8]  every_ms   the rate's emission interval; 0: no rate limit
-- ARGV[9]  burst
-- ARGV[10] held_permits  permits the caller holds for these syncs (<= n)
-- ARGV[11] held_tokens   rate tokens the caller holds for these syncs (<= n)
-- ARGV[12] ahead      rate tokens to take beyond n, best effort (none
--                     for a probe)
-- ARGV[13] ahead_ms   the caller uses them within ahead_ms: they are
--                     charged as if taken then (see below)
-- Result: {granted, probe (1: the grant is the fleet's probe), wait_ms
-- (granted 0: when to ask again), open, since, next, now, permits (new
-- ones, named base:1..permits), ahead (tokens taken ahead)}.
local nowms = now()
local n = tonumber(ARGV[1])
local state, permits, rate = KEYS[1], KEYS[2], KEYS[3]
local held_permits, held_tokens = tonumber(ARGV[10]), tonumber(ARGV[11])
local ahead, ahead_ms = tonumber(ARGV[12]), tonumber(ARGV[13])
own_type(state, 'hash')
local open, since, nxt = breaker_get(state, nowms, tonumber(ARGV[4]))
local probe = 0
if ARGV[2] == '1' and open then
  if nowms < nxt then
    return {0, 0, nxt - nowms, 1, since, nxt, nowms, 0, 0}
  end
  n, probe, ahead = 1, 1, 0
end
held_permits, held_tokens = math.min(held_permits, n), math.min(held_tokens, n)
local max = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])
if max > 0 then
  own_type(permits, 'zset')
  redis.call('ZREMRANGEBYSCORE', permits, '-inf', nowms)
  -- A permit no daemon could have written (beyond two leases ahead,
  -- inf) would hold a place for ever.
  redis.call('ZREMRANGEBYSCORE', permits, '(' .. num(nowms + 2 * ttl), '+inf')
  local free = math.max(max - redis.call('ZCARD', permits), 0)
  if held_permits + free < n then n = held_permits + free end
  if n == 0 then
    local first = redis.call('ZRANGE', permits, 0, 0, 'WITHSCORES')
    local wait = ttl
    if first[2] then wait = tonumber(first[2]) - nowms end
    return {0, 0, wait, open and 1 or 0, since, nxt, nowms, 0, 0}
  end
end
local every = tonumber(ARGV[8])
local got = 0
if every > 0 then
  own_type(rate, 'string')
  local burst = tonumber(ARGV[9])
  local tolerance = burst * every
  local tat0 = tonumber(redis.call('GET', rate)) or nowms
  -- No grant ever sets it beyond now + tolerance: a value there was
  -- made by hand (or is garbage) and would stop the fleet.
  if tat0 ~= tat0 or tat0 < nowms or tat0 > nowms + tolerance then tat0 = nowms end
  local tat = tat0
  local need = math.max(n - held_tokens, 0)
  if need > 0 then
    local allowed = math.floor((nowms + tolerance - tat) / every + 1e-9)
    if allowed < need then
      need = math.max(allowed, 0)
      n = held_tokens + need
    end
    if n == 0 then
      return {0, 0, math.ceil(tat + every - tolerance - nowms), open and 1 or 0, since, nxt, nowms, 0, 0}
    end
    tat = tat + need * every
  end
  -- Tokens taken ahead are charged from now + ahead_ms, the latest they
  -- are used: so used then they still keep every window of the fleet's
  -- starts within the rate and the burst.
  if ahead > 0 then
    local from = math.max(tat, nowms + ahead_ms)
    got = math.max(math.min(ahead, math.floor((nowms + tolerance - from) / every + 1e-9)), 0)
    if got > 0 then tat = from + got * every end
  end
  if tat ~= tat0 then
    redis.call('SET', rate, string.format('%.3f', tat), 'PX', math.ceil(tat - nowms) + 1000)
  end
end
if probe == 1 then
  redis.call('HSET', state, 'next', nowms + tonumber(ARGV[3]))
end
local new = 0
if max > 0 then new = math.max(n - held_permits, 0) end
if new > 0 then
  local args = {}
  for i = 1, new do
    args[2 * i - 1] = nowms + ttl
    args[2 * i] = ARGV[7] .. ':' .. i
  end
  redis.call('ZADD', permits, unpack(args))
end
return {n, probe, 0, open and 1 or 0, since, nxt, nowms, new, got}
