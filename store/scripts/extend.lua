-- extend.lua: compare-and-extend records (heartbeat and confirm).
-- KEYS[i]    record key i, for i = 1..n (all in one slot)
-- KEYS[n+1]  for item leases (not standalone locks, which have no due
--            entry): the shard's due ZSET. Each item extended is held
--            there until the new lease end, as a claim held it (claim_clock):
--            else, once the first lease end passed, an item in flight
--            would read as due until a claim round met it (held).
-- ARGV[1]    ttl in ms
-- ARGV[2]    state to write (0 leaves the state as it is)
-- ARGV[2+i]  token expected in record i (16 bytes); with KEYS[n+1], the
--            item's ID follows it
-- Result: 2 integers per key: code (1 extended, 0 missing, -1 another
-- owner's record), the record's fence (when code is 1).
local nowms = now()
local ttl = ARGV[1]
local state = tonumber(ARGV[2])
local n = #ARGV - 2
local due = KEYS[n + 1]
local out, hb = {}, be8(nowms)
local held, zadd
if due then held, zadd = num(nowms + tonumber(ttl)), {'ZADD', due, 'XX', 'GT'} end
for i = 1, n do
  local cur = get_rec(KEYS[i])
  local code, fence = 0, 0
  local tok = ARGV[2 + i]
  if due then tok = string.sub(tok, 1, 16) end
  if cur and #cur >= 53 and token_of(cur) == tok then
    local rec = patch(cur, 40, hb)
    if state > 0 then rec = patch(rec, 48, string.char(state)) end
    redis.call('SET', KEYS[i], rec, 'PX', ttl)
    code, fence = 1, fence_of(cur)
    if due then
      zadd[#zadd + 1] = held
      zadd[#zadd + 1] = string.sub(ARGV[2 + i], 17)
    end
  elseif cur then
    code = -1
  end
  out[#out + 1] = code
  out[#out + 1] = fence
end
-- One ZADD for all. XX: an item removed while in flight is not added
-- back; GT: a score already later (+inf, quarantined) is never moved
-- back. A due key of another type (made by hand) fails no heartbeat:
-- the records are extended, and the claims report the shard damaged.
if zadd and #zadd > 4 then
  local ok, e = pcall(function() return send(zadd, 4) end)
  if not ok and not string.find(tostring(e.err or e), 'WRONGTYPE', 1, true) then error(e) end
end
return out
