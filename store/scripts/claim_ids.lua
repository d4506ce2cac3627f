-- claim_ids.lua: claim named items of one shard that are in the due
-- index and not quarantined, due or not, with SET NX PX and a fresh
-- fence each (claim_named). Idempotent for its token: a retried call
-- finds the claims it made and returns them as claimed, which is how a
-- caller whose reply was lost learns attempt and lastSync.
-- KEYS[1]    due ZSET of the shard
-- KEYS[2]    meta HASH of the shard
-- KEYS[3]    epoch marker of the shard
-- KEYS[4]    err HASH of the shard
-- KEYS[4+i]  record key of item i
-- ARGV[1]    "ids": names the call on the wire (MONITOR, SLOWLOG); unread
-- ARGV[2]    ttl in ms
-- ARGV[1+2i] id of item i, ARGV[2+2i] its record template
-- Result: {-1}, {-2, ms} or {-2, ms, 1} when the shard may not be
-- claimed (claim_gate).
-- Else 5 integers per item, in order: code (1 claimed or already ours
-- with this token, 0 unknown or quarantined, -1 held by another owner,
-- -2 held by a foreign record, -3 quarantined now: its fence cannot be
-- raised, see fence_refused), fence, attempt, lastSyncMs, score before
-- the claim.
local nowms, nowus = now()
local ttl = tonumber(ARGV[2])
local c = claim_clock(nowms, ttl)
local gate = claim_gate(KEYS[3], nowms, ttl)
if gate then return gate end
local out = {}
for i = 1, #KEYS - 4 do
  local id = ARGV[1 + 2 * i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  local ok = score and not is_inf(score)
  claim_named(out, ok, KEYS[1], KEYS[2], KEYS[4], KEYS[4 + i], id, ARGV[2 + 2 * i], ok and due_ms(score), ttl, nowms, nowus, c)
end
return out
