-- trigger.lua: make items of one shard due now, with a bounded head
-- start, and record why (see Store.Trigger for the rule).
-- KEYS[1]    due ZSET of the shard
-- KEYS[2]    trig HASH of the shard: id -> "<ms> <reason>"
-- KEYS[3]    again HASH of the shard: id -> boost (ms), read by release.lua
-- KEYS[4]    manual SET of the shard: an item this call adds is marked
--            there, as `syncd items add` marks it (add_manual.lua), so
--            that a reconcile does not remove it
-- KEYS[4+i]  record key of item i
-- ARGV[1]    boost in ms (0 or more)
-- ARGV[2]    reason
-- ARGV[3]    "1": add an item that is not in the index (and mark it
--            manual); else leave it
-- ARGV[3+i]  id of item i
-- Result: one code per item: 1 due at now - boost (or earlier: an item
-- that has waited longer keeps its place), 2 in flight (a record exists:
-- its score is its lease's expiry and stays; release.lua makes it due at
-- now - boost once), 3 added (ARGV[3]), 0 not in the index, -1
-- quarantined (nothing changed: requeue brings it back).
local nowms = now()
local boost = tonumber(ARGV[1])
local at = nowms - boost
local note = num(nowms) .. ' ' .. ARGV[2]
local out = {}
if ARGV[3] == '1' then own_type(KEYS[4], 'set') end
for i = 1, #KEYS - 4 do
  local id = ARGV[3 + i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  local code = 0
  if not score then
    if ARGV[3] == '1' then
      redis.call('ZADD', KEYS[1], 'NX', at, id)
      redis.call('SADD', KEYS[4], id)
      code = 3
    end
  elseif is_inf(score) then
    code = -1
  elseif redis.call('PTTL', KEYS[4 + i]) ~= -2 then
    -- PTTL, not EXISTS: the documented least-privilege ACL grants it.
    wrongtype(redis.pcall('HSET', KEYS[3], id, boost))
    code = 2
  else
    if due_ms(score) > at then redis.call('ZADD', KEYS[1], 'XX', at, id) end
    code = 1
  end
  -- A damaged trig or again key (another type, made by hand) loses the
  -- note or the second sync, never the trigger itself.
  if code > 0 then wrongtype(redis.pcall('HSET', KEYS[2], id, note)) end
  out[i] = code
end
return out
