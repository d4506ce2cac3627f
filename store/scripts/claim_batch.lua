-- claim_batch.lua: a batch run's claim of named items of one shard: those
-- whose lastSync is before the run's start, at once unless they are
-- failing (attempts > 0) and not due yet; quarantined items never. SET NX
-- PX with a fresh fence each (claim_named), idempotent for its token like
-- claim_ids.lua.
-- KEYS[1]    due ZSET of the shard
-- KEYS[2]    meta HASH of the shard
-- KEYS[3]    epoch marker of the shard
-- KEYS[4]    err HASH of the shard
-- KEYS[4+i]  record key of item i
-- ARGV[1]    "batch": names the call on the wire (MONITOR, SLOWLOG); unread
-- ARGV[2]    ttl in ms
-- ARGV[3]    the run's start, ms on Redis's clock
-- ARGV[2+2i] id of item i, ARGV[3+2i] its record template
-- Result: as claim_ids.lua; code 0 also means synced in this run, or
-- failing and not due.
local nowms, nowus = now()
local ttl = tonumber(ARGV[2])
local c = claim_clock(nowms, ttl)
local gate = claim_gate(KEYS[3], nowms, ttl)
if gate then return gate end
local since = tonumber(ARGV[3])
local out = {}
for i = 1, #KEYS - 4 do
  local id = ARGV[2 + 2 * i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  local ok = score and not is_inf(score)
  if ok then
    local _, l, a = meta_get(KEYS[2], id)
    ok = l < since and (a == 0 or due_ms(score) <= nowms)
  end
  claim_named(out, ok, KEYS[1], KEYS[2], KEYS[4], KEYS[4 + i], id, ARGV[3 + 2 * i], ok and due_ms(score), ttl, nowms, nowus, c)
end
return out
