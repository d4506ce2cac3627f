-- target_report.lua: tells the breaker how a sync ended.
-- KEYS[1]  the breaker's state HASH
-- KEYS[2]  suspects SET: distinct items whose unclassified failures came
--          with no success between them
-- ARGV[1]  kind       ok | target | item | permanent
-- ARGV[2]  id         the item
-- ARGV[3]  after_ms   target: how long the target asked to be left alone
-- ARGV[4]  probe_ms   the probe interval
-- ARGV[5]  failures   item: how many distinct suspects open the breaker
--                     (0: never)
-- ARGV[6]  window_ms  how long a suspect is remembered
-- ARGV[7]  reason     the error, kept for status
-- ARGV[8]  cap_ms     the longest a breaker may stay open without a probe
-- ARGV[9]  failed     permanent: 1 when the item's last attempt failed
-- ok closes the breaker; target opens it (or keeps it open, at least
-- after_ms); item opens it when it makes `failures` suspects. permanent
-- is the item's own (own = 1) when the item failed before and is no
-- longer a suspect (a success came since, or its window passed: the
-- target works and the item does not), or is the only one (nothing
-- else failed since: one item failing alone); else it is an item
-- failure.
-- Result: {open, changed (1 opened, -1 closed, 0 not), since, next,
-- suspects, now, own}.
local nowms = now()
local state, suspects = KEYS[1], KEYS[2]
own_type(state, 'hash')
own_type(suspects, 'set')
local kind = ARGV[1]
local cap = tonumber(ARGV[8])
local open, since, nxt = breaker_get(state, nowms, cap)
local changed, own = 0, 0
local function trip(after, reason)
  if not open then
    open, since, changed = true, nowms, 1
    redis.call('HINCRBY', state, 'opens', 1)
  end
  local until_ms = nowms + math.min(math.max(after, tonumber(ARGV[4])), cap)
  if until_ms > nxt then nxt = until_ms end
  redis.call('HSET', state, 'open', 1, 'since', since, 'next', nxt, 'reason', reason)
  redis.call('DEL', suspects)
end
if kind == 'ok' then
  if open then
    open, changed = false, -1
    redis.call('HSET', state, 'open', 0, 'closed', nowms)
    redis.call('HINCRBY', state, 'closes', 1)
  end
  redis.call('DEL', suspects)
elseif kind == 'target' then
  trip(tonumber(ARGV[3]), ARGV[7])
elseif kind == 'permanent' and not open and ARGV[9] == '1' and
    (redis.call('SISMEMBER', suspects, ARGV[2]) == 0 or redis.call('SCARD', suspects) == 1) then
  own = 1
  redis.call('SREM', suspects, ARGV[2])
elseif not open then
  redis.call('SADD', suspects, ARGV[2])
  redis.call('PEXPIRE', suspects, ARGV[6])
  local n = redis.call('SCARD', suspects)
  local failures = tonumber(ARGV[5])
  if failures > 0 and n >= failures then
    trip(0, n .. ' items failed with no success between them; the last: ' .. ARGV[7])
  end
end
return {open and 1 or 0, changed, since, nxt, redis.call('SCARD', suspects), nowms, own}
