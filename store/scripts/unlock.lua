-- unlock.lua: compare-and-delete one standalone lock, for an Unlock call
-- that goes alone (Cluster, or a Store without auto-pipelining; calls
-- that a Store's coalescer gathers go through unlock_batch.lua).
-- ARGV[1]  how long the released tokens are kept, ms
-- ARGV[2]  the lock's token
-- KEYS[1]  the lock record key
-- KEYS[2]  the lock's released tokens (same slot): the tokens of its
--          last unlocks, 16 bytes each, newest first
-- Result: 1 released, 0 not held (no record), -1 held by another owner.
-- A call re-sent after a dropped connection (go-redis re-sends a whole
-- pipeline) finds the record gone, or taken by the next owner, when its
-- first send released it: it finds its token among the released ones and
-- reports 1 again. Only an unlock that carried the token deleted a record
-- holding it, so a stale owner, whose lock expired, is never told it
-- released: its token is not there.
-- The record and the released tokens are read in one MGET, so every
-- unlock needs the commands unlock_batch.lua needs (an ACL user made for
-- syncd works at any load). MGET reads a key of another type (made by
-- hand) as nil: get_rec then reads a record key of another type as '', a
-- record nobody holds; released tokens of another type read as none and
-- are overwritten.
local rk, ring_key, keep, tok = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local v = redis.call('MGET', rk, ring_key)
local cur, ring = v[1] or get_rec(rk), v[2] or ''
if cur and token_of(cur) == tok then
  redis.call('DEL', rk)
  redis.call('SET', ring_key, tok .. string.sub(ring, 1, 112), 'PX', keep)
  return 1
end
for i = 1, #ring - 15, 16 do
  if string.sub(ring, i, i + 15) == tok then return 1 end
end
if cur then return -1 end
return 0
