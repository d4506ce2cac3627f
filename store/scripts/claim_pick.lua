-- claim_pick.lua: claim the longest-waiting due items of one shard
-- (score <= now), one per record template, found by the script itself:
-- one round trip from the due index to the claims, and concurrent picks
-- never collide. Each claim is SET NX PX with a fresh fence (claim_one).
-- KEYS[1]    due ZSET of the shard
-- KEYS[2]    meta HASH of the shard
-- KEYS[3]    epoch marker of the shard
-- KEYS[4]    receipt: the ids claimed, kept for ttl ms, so a caller whose
--            reply was lost can learn what it claimed, and a call re-sent
--            after a dropped connection (go-redis re-sends a whole
--            pipeline) replies with what its first send claimed instead
--            of claiming more under the same token
-- KEYS[5]    err HASH of the shard
-- ARGV[1]    "pick": names the call on the wire (MONITOR, SLOWLOG, and
--            the proxy of tests/fault, which delays these replies); unread
-- ARGV[2]    ttl in ms
-- ARGV[2+i]  record template i; its fence, claimed-at, heartbeat-at and
--            attempt are patched in here
-- Result: {-1}, {-2, ms} or {-2, ms, 1} when the shard may not be
-- claimed (claim_gate).
-- Else 5 values per item claimed, in due order: id, fence, attempt,
-- lastSyncMs, score before the claim; an item held by a foreign record
-- (see held) comes as id, -1, 0, 0, 0 and takes no template, as does an
-- item quarantined now because its fence cannot be raised (see
-- fence_refused), as id, -2, 0, 0, 0. Two more
-- values end the reply: 1 and the lowest due score left in the shard
-- (ms, due_ms), or 0, 0 when there is none (only quarantined items).
local nowms, nowus = now()
local ttl = tonumber(ARGV[2])
local c = claim_clock(nowms, ttl)
local gate = claim_gate(KEYS[3], nowms, ttl)
if gate then return gate end
local recs = string.sub(KEYS[1], 1, -4) .. 'rec:' -- "<prefix>:{s<k>}:rec:"
local got, out = {}, {}
local prior = wrongtype(redis.pcall('GET', KEYS[4]))
if prior and prior ~= '' then
  -- Re-sent: the items the first send claimed, in the same order, each
  -- with the template it took, as long as their records are still ours.
  -- Their score before the claim is gone: 0, as after a lost reply.
  for id in string.gmatch(prior, '[^\n]+') do
    got[#got + 1] = id
    local cur, tmpl = get_rec(recs .. enc(id)), ARGV[2 + #got]
    if cur and tmpl and token_of(cur) == token_of(tmpl) then
      local _, l = meta_get(KEYS[2], id)
      out[#out + 1] = id
      out[#out + 1] = fence_of(cur)
      out[#out + 1] = attempt_of(cur)
      out[#out + 1] = l
      out[#out + 1] = 0
    end
  end
  return pick_head(out, KEYS[1])
end
local cand = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nowms, 'WITHSCORES', 'LIMIT', '0', #ARGV - 2)
-- The candidates' meta values in one HMGET, and the claims' meta values
-- and held scores written in one HSET and one ZADD at the end: per item,
-- only its SET NX is a command of its own.
local hmget = {'HMGET', KEYS[2]}
for i = 1, #cand, 2 do hmget[#hmget + 1] = cand[i] end
local metas = #cand > 0 and send(hmget, 2) or {}
local hset, zadd = {'HSET', KEYS[2]}, {'ZADD', KEYS[1], 'XX'}
for i = 1, #cand, 2 do
  local id = cand[i]
  local rk = recs .. enc(id)
  local fence, attempt, last, x = claim_one(KEYS[1], KEYS[2], KEYS[5], rk, id, ARGV[3 + #got], nowus, c, metas[(i + 1) / 2])
  local code -- of an item not claimed that is reported: -1 foreign, -2 quarantined
  if fence then
    got[#got + 1] = id
    hset[#hset + 1] = id
    hset[#hset + 1] = x
    zadd[#zadd + 1] = c.held
    zadd[#zadd + 1] = id
    out[#out + 1] = id
    out[#out + 1] = fence
    out[#out + 1] = attempt
    out[#out + 1] = last
    out[#out + 1] = due_ms(cand[i + 1])
  elseif not x then
    code = -2
  elseif held(KEYS[1], rk, id, x, ttl, nowms) then
    code = -1
  end
  if code then
    out[#out + 1] = id
    out[#out + 1] = code
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
end
if #got > 0 then
  send(hset, 2)
  send(zadd, 3)
  redis.call('SET', KEYS[4], table.concat(got, '\n'), 'PX', ttl)
end
return pick_head(out, KEYS[1])
