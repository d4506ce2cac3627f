-- unlock.lua: compare-and-delete standalone locks: one, or a batch that
-- Store gathered from concurrent Unlock calls (lockOps in locks.go).
-- ARGV[1]  how long the released tokens are kept, ms
-- then per lock: its token
-- KEYS, two per lock, in the same order:
--   the lock record key
--   the lock's released tokens (same slot): the tokens of its last
--   unlocks, 16 bytes each, newest first
-- Result: one code per lock, 1 released, 0 not held (no record), -1 held
-- by another owner; for one lock the code alone (a reply table costs
-- Redis more than the number).
-- A call re-sent after a dropped connection (go-redis re-sends a whole
-- pipeline) finds the record gone, or taken by the next owner, when its
-- first send released it: it finds its token among the released ones and
-- reports 1 again. Only an unlock that carried the token deleted a record
-- holding it, so a stale owner, whose lock expired, is never told it
-- released: its token is not there.
local keep, n = ARGV[1], #ARGV - 1

-- released: whether tok is among the released tokens ring (nil or false:
-- none). It reads no local of the script, so it costs no upvalue.
local function released(ring, tok)
  if not ring then return false end
  for i = 1, #ring - 15, 16 do
    if string.sub(ring, i, i + 15) == tok then return true end
  end
  return false
end

-- One lock, at the top level (a function reading the script's locals
-- costs Redis an upvalue each per call): its record and released tokens
-- read in one MGET, as a batch reads them (no cheaper than two GETs,
-- but then every unlock needs the same commands, and an ACL user made
-- for syncd works at any load). MGET reads a key of another type (made
-- by hand) as nil: get_rec then reads a record key of another type as
-- '', a record nobody holds; released tokens of another type read as
-- none and are overwritten.
if n == 1 then
  local rk, ring_key, tok = KEYS[1], KEYS[2], ARGV[2]
  local v = redis.call('MGET', rk, ring_key)
  local cur, ring = v[1] or get_rec(rk), v[2]
  if cur and token_of(cur) == tok then
    redis.call('DEL', rk)
    redis.call('SET', ring_key, tok .. string.sub(ring or '', 1, 112), 'PX', keep)
    return 1
  end
  if released(ring, tok) then return 1 end
  if cur then return -1 end
  return 0
end

-- A batch: the records and the released tokens are read in one MGET
-- each and the released records deleted in one DEL (a command from Lua
-- costs Redis thousands of instructions before any work), with the same
-- outcome as the lone path above for each lock in turn: a name twice in
-- one call sees what the one before it left.
local rks, rings = {}, {}
for i = 1, n do
  rks[i], rings[i] = KEYS[2 * i - 1], KEYS[2 * i]
end
local curs = redis.call('MGET', unpack(rks))
local rel = redis.call('MGET', unpack(rings))
local cur_of, rel_of = {}, {} -- by key, as this call leaves them
for i = 1, n do
  if cur_of[rks[i]] == nil then
    -- MGET reads a key of another type (made by hand) as nil; get_rec
    -- reads it as '', a record nobody holds, as the lone path does.
    cur_of[rks[i]] = curs[i] or get_rec(rks[i])
  end
  if rel_of[rings[i]] == nil then rel_of[rings[i]] = rel[i] or false end
end

local out, gone = {}, {'DEL'}
for i = 1, n do
  local rk, ring_key, tok = rks[i], rings[i], ARGV[i + 1]
  local cur, ring = cur_of[rk], rel_of[ring_key]
  out[i] = 0
  if cur and token_of(cur) == tok then
    gone[#gone + 1] = rk
    cur_of[rk] = false
    ring = tok .. string.sub(ring or '', 1, 112)
    rel_of[ring_key] = ring
    redis.call('SET', ring_key, ring, 'PX', keep)
    out[i] = 1
  elseif released(ring, tok) then
    out[i] = 1
  elseif cur then
    out[i] = -1
  end
end
if #gone > 1 then redis.call('DEL', unpack(gone, 2)) end
return out
