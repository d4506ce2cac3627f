-- unlock.lua: compare-and-delete a standalone lock.
-- KEYS[1]  lock record key
-- KEYS[2]  the lock's released tokens (same slot): the tokens of its last
--          unlocks, 16 bytes each, newest first
-- ARGV[1]  token
-- ARGV[2]  how long the released tokens are kept, ms
-- Result: 1 released, 0 not held (no record), -1 held by another owner.
-- A call re-sent after a dropped connection (go-redis re-sends a whole
-- pipeline) finds the record gone, or taken by the next owner, when its
-- first send released it: it finds its token among the released ones and
-- reports 1 again. Only an unlock that carried the token deleted a record
-- holding it, so a stale owner, whose lock expired, is never told it
-- released: its token is not there.
local tok = ARGV[1]
local cur = get_rec(KEYS[1])
if cur and token_of(cur) == tok then
  redis.call('DEL', KEYS[1])
  local ring = wrongtype(redis.pcall('GET', KEYS[2])) or ''
  redis.call('SET', KEYS[2], tok .. string.sub(ring, 1, 112), 'PX', ARGV[2])
  return 1
end
local ring = wrongtype(redis.pcall('GET', KEYS[2]))
if ring then
  for i = 1, #ring - 15, 16 do
    if string.sub(ring, i, i + 15) == tok then return 1 end
  end
end
if cur then return -1 end
return 0
