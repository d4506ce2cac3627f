-- unlock_batch.lua: compare-and-delete the standalone locks of the Unlock
-- calls one Store's coalescer gathered (lockOps in locks.go): one or
-- many, in one call.
-- ARGV[1]  how long the receipt is kept, ms
-- ARGV[2]  the locks' tokens, 16 bytes each, one string (an argument
--          each would cost Redis more to parse and hand to Lua)
-- KEYS[1]  the Store's unlock receipt (Keys.LockReceipt): the tokens
--          its last call of this script released, 16 bytes each
-- then per lock, in the same order: the lock record key
-- Result: one code per lock: 1 released, 0 not held (no record), -1
-- held by another owner.
-- A call re-sent after a dropped connection (go-redis re-sends a whole
-- pipeline) finds the records it released gone, or taken by the next
-- owner: it finds their tokens in the receipt and reports 1 again. The
-- receipt holds one call's tokens only, and that is enough: a Store
-- sends one call of this script at a time (the coalescer's alone rule),
-- so nothing of its own overwrites the receipt while a call is re-sent,
-- and no other Store writes it. A re-send releases nothing new (its
-- first send ran whole or not at all) and leaves the receipt as it is.
-- Only an unlock that carried the token deleted a record holding it, so
-- a stale owner, whose lock expired, is never told it released: its
-- token is in no receipt.
-- The records and the receipt are read in one MGET and the released
-- records deleted in one DEL (a command from Lua costs Redis thousands
-- of instructions before any work); the cost per lock is the compare.
-- MGET reads a key of another type (made by hand) as nil: get_rec then
-- reads a record key of another type as '', a record nobody holds, as
-- unlock.lua does; a receipt of another type reads as none and is
-- overwritten.
local keep, toks_arg, n = ARGV[1], ARGV[2], #KEYS - 1
local v = redis.call('MGET', unpack(KEYS))
local rcpt = v[1] or ''

-- released: whether tok is among the tokens of the receipt.
local function released(ring, tok)
  for i = 1, #ring - 15, 16 do
    if string.sub(ring, i, i + 15) == tok then return true end
  end
  return false
end

local out, gone, toks = {}, {'DEL'}, {}
local cur_of, now = {}, {} -- by key, as this call leaves it; tokens released by this call
for i = 1, n do
  local rk, tok = KEYS[i + 1], string.sub(toks_arg, 16 * i - 15, 16 * i)
  local cur = cur_of[rk]
  if cur == nil then
    cur = v[i + 1] or get_rec(rk)
  end
  if cur and token_of(cur) == tok then
    gone[#gone + 1] = rk
    toks[#toks + 1] = tok
    cur_of[rk], now[tok] = false, true
    out[i] = 1
  else
    cur_of[rk] = cur
    if now[tok] or released(rcpt, tok) then
      out[i] = 1
    elseif cur then
      out[i] = -1
    else
      out[i] = 0
    end
  end
end
if #gone > 1 then
  redis.call('DEL', unpack(gone, 2))
  redis.call('SET', KEYS[1], table.concat(toks), 'PX', keep)
end
return out
