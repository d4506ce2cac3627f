-- unlock_batch.lua: compare-and-delete the standalone locks of the Unlock
-- calls one Store's coalescer gathered (lockOps in locks.go): one or
-- many, in one call.
-- ARGV[1]  how long the receipt is kept, ms
-- ARGV[2]  the locks' tokens, 16 bytes each, one string (an argument
--          each would cost Redis more to parse and hand to Lua)
-- KEYS[1]  the Store's unlock receipt (Keys.LockReceipt): what its last
--          calls of this script that released a lock released, newest
--          first, at most 4 calls; each call's part is its length (4
--          bytes) and, per lock released, the token, the record key and
--          a NUL (no key of a lock holds one: IDs hold no control
--          characters)
-- then per lock, in the same order: the lock record key
-- Result: one code per lock (for one lock, the code alone): 1 released,
-- 0 not held (no record), -1 held by another owner.
-- A call re-sent after a dropped connection (go-redis re-sends a whole
-- pipeline), or an unlock repeated soon after, finds the records it
-- released gone, or taken by the next owner: it finds the name and token
-- in the receipt and reports 1 again. Only an unlock that carried the
-- token deleted a record holding it, and the receipt pairs each token
-- with its name, so a stale owner, whose lock expired, is never told it
-- released, whatever its token released elsewhere. A Store sends one
-- call of this script at a time (the coalescer's exclusive rule), so its
-- own calls cannot push a reply out while one is re-sent; the receipt
-- keeps 4 calls' parts so that a call the Store gave up on, which Redis
-- may still run late, cannot push out the part of the call after it. No
-- other Store writes the receipt.
-- The records and the receipt are read in one MGET and the released
-- records deleted in one DEL (a command from Lua costs Redis thousands
-- of instructions before any work); the receipt is searched only for an
-- unlock that finds its record gone or taken. MGET reads a key of
-- another type (made by hand) as nil: get_rec then reads a record key of
-- another type as '', a record nobody holds, as unlock.lua does; a
-- receipt of another type reads as empty and is overwritten.
local keep, toks, n = ARGV[1], ARGV[2], #KEYS - 1

-- kept: the end of the receipt's 3 newest parts, which follow this
-- call's part in the receipt it writes.
local function kept(rcpt)
  local at, len = 1, #rcpt
  for _ = 1, 3 do
    if at + 3 > len then break end
    local a, b, c, d = string.byte(rcpt, at, at + 3) -- be4's length
    local stop = at + 3 + ((a * 256 + b) * 256 + c) * 256 + d
    if stop > len then break end
    at = stop + 1
  end
  return at - 1
end

-- One lock, as at low load nearly every call carries: the same steps
-- without the tables that a batch needs, and its code as the reply (a
-- table reply costs Redis a reply length written afterwards and its own
-- reply buffer).
if n == 1 then
  local rk = KEYS[2]
  local v = redis.call('MGET', KEYS[1], rk)
  local rcpt, cur = v[1] or '', v[2] or get_rec(rk)
  if cur and token_of(cur) == toks then
    redis.call('DEL', rk)
    local body = toks .. rk .. '\0'
    redis.call('SET', KEYS[1], be4(#body) .. body .. string.sub(rcpt, 1, kept(rcpt)), 'PX', keep)
    return 1
  elseif string.find(rcpt, toks .. rk .. '\0', 1, true) then
    return 1
  elseif cur then
    return -1
  end
  return 0
end

local v = redis.call('MGET', unpack(KEYS))
local rcpt = v[1] or ''

local out, gone, parts = {}, {'DEL'}, {}
local cur_of, now = {}, {} -- by key: the record as this call leaves it; the token it released
for i = 1, n do
  local rk, tok = KEYS[i + 1], string.sub(toks, 16 * i - 15, 16 * i)
  local cur = cur_of[rk]
  if cur == nil then
    cur = v[i + 1] or get_rec(rk)
  end
  if cur and token_of(cur) == tok then
    gone[#gone + 1] = rk
    local m = #parts -- three parts, joined once: no string made per lock
    parts[m + 1], parts[m + 2], parts[m + 3] = tok, rk, '\0'
    cur_of[rk], now[rk] = false, tok
    out[i] = 1
  else
    cur_of[rk] = cur
    -- The pair, whole, can only be found where this script wrote it: its
    -- 16 token bytes are random, and a key ends at its NUL.
    if now[rk] == tok or string.find(rcpt, tok .. rk .. '\0', 1, true) then
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
  -- This call's part first, then the 3 newest before it.
  local body = table.concat(parts)
  redis.call('SET', KEYS[1], be4(#body) .. body .. string.sub(rcpt, 1, kept(rcpt)), 'PX', keep)
end
return out
