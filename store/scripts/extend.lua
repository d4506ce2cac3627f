-- extend.lua: compare-and-extend records (heartbeat and confirm).
-- KEYS[i]    record key i (all in one slot)
-- ARGV[1]    ttl in ms
-- ARGV[2]    state to write (0 leaves the state as it is)
-- ARGV[2+i]  token expected in record i
-- Result: 2 integers per key: code (1 extended, 0 missing, -1 another
-- owner's record), the record's fence (when code is 1).
local nowms = now()
local ttl = ARGV[1]
local state = tonumber(ARGV[2])
local out, hb = {}, be8(nowms)
for i = 1, #KEYS do
  local cur = get_rec(KEYS[i])
  local code, fence = 0, 0
  if cur and #cur >= 53 and token_of(cur) == ARGV[2 + i] then
    local rec = patch(cur, 40, hb)
    if state > 0 then rec = patch(rec, 48, string.char(state)) end
    redis.call('SET', KEYS[i], rec, 'PX', ttl)
    code, fence = 1, fence_of(cur)
  elseif cur then
    code = -1
  end
  out[#out + 1] = code
  out[#out + 1] = fence
end
return out
