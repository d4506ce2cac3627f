-- unlock_batch.lua: compare-and-delete the standalone locks of the Unlock
-- calls one Store's coalescer gathered (lockOps in locks.go): one or
-- many, in one call.
-- ARGV[1]  how long the receipt is kept, ms
-- ARGV[2]  the locks' tokens, 16 bytes each, one string (an argument
--          each would cost Redis more to parse and hand to Lua)
-- ARGV[3]  this call's id, 8 bytes, never used twice by its Store
-- KEYS[1]  the Store's unlock receipt (Keys.LockReceipt): the replies of
--          its last calls of this script that released a lock, newest
--          first, at most 4, each its id, its count (2 bytes) and one
--          byte per lock (code + 1)
-- then per lock, in the same order: the lock record key
-- Result: one code per lock: 1 released, 0 not held (no record), -1
-- held by another owner.
-- A call re-sent after a dropped connection (go-redis re-sends a whole
-- pipeline) finds its first send's reply in the receipt by its id and
-- returns it: the records it released are gone by then, or taken by the
-- next owner. A call's id is its own, so no other call, and no other
-- lock name, ever reads that reply; a stale owner, whose lock expired,
-- is never told it released. A Store sends one call of this script at a
-- time (the coalescer's exclusive rule); the receipt keeps 4 replies so that
-- a call its Store gave up on, which Redis may still run late, cannot
-- push out the reply of the call after it. A call that released nothing
-- leaves no reply: re-sent, it finds the same nothing.
-- The records and the receipt are read in one MGET and the released
-- records deleted in one DEL (a command from Lua costs Redis thousands
-- of instructions before any work); the cost per lock is the compare.
-- MGET reads a key of another type (made by hand) as nil: get_rec then
-- reads a record key of another type as '', a record nobody holds, as
-- unlock.lua does; a receipt of another type reads as empty and is
-- overwritten.
local keep, toks, id, n = ARGV[1], ARGV[2], ARGV[3], #KEYS - 1
local v = redis.call('MGET', unpack(KEYS))
local rcpt = v[1] or ''

-- The receipt's replies, walked by their counts: this call's, if it is
-- a re-send, and where the third reply ends (what a new reply keeps).
local at, seen, keep_to = 1, 0, nil
while at + 9 <= #rcpt do
  local hi, lo = string.byte(rcpt, at + 8, at + 9)
  local m = hi * 256 + lo
  if at + 9 + m > #rcpt then break end -- cut short: not a reply
  if string.sub(rcpt, at, at + 7) == id and m == n then
    local out = {string.byte(rcpt, at + 10, at + 9 + m)}
    for i = 1, m do out[i] = out[i] - 1 end
    return out
  end
  at, seen = at + 10 + m, seen + 1
  if seen == 3 then keep_to = at - 1 end
end

local out, gone, codes = {}, {'DEL'}, {}
local cur_of, now = {}, {} -- by key: the record as this call leaves it; the token it released
for i = 1, n do
  local rk, tok = KEYS[i + 1], string.sub(toks, 16 * i - 15, 16 * i)
  local cur = cur_of[rk]
  if cur == nil then
    cur = v[i + 1] or get_rec(rk)
  end
  if cur and token_of(cur) == tok then
    gone[#gone + 1] = rk
    cur_of[rk], now[rk] = false, tok
    out[i] = 1
  else
    cur_of[rk] = cur
    if now[rk] == tok then
      out[i] = 1 -- the same unlock twice in one call
    elseif cur then
      out[i] = -1
    else
      out[i] = 0
    end
  end
  codes[i] = out[i] + 1
end
if #gone > 1 then
  redis.call('DEL', unpack(gone, 2))
  local old = string.sub(rcpt, 1, keep_to or (at - 1))
  redis.call('SET', KEYS[1], id .. string.char(math.floor(n / 256), n % 256) .. string.char(unpack(codes)) .. old, 'PX', keep)
end
return out
