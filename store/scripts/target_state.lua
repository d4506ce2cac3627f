-- target_state.lua: reads the target's state, for status and for the
-- daemons' view between their own calls.
-- KEYS[1] state HASH, KEYS[2] suspects SET, KEYS[3] permits ZSET
-- ARGV[1] cap_ms
-- Result: {open, since, next, suspects, permits in force, opens, closes,
-- closed (ms), now, reason}.
local nowms = now()
local function count(cmd, key, ...)
  local v = redis.pcall(cmd, key, ...)
  if type(v) == 'table' then return 0 end
  return v
end
local ok, v = pcall(redis.call, 'HMGET', KEYS[1], 'open', 'since', 'next', 'opens', 'closes', 'closed', 'reason')
if not ok then v = {} end
local open, since, nxt = breaker_of(v, nowms, tonumber(ARGV[1]))
return {open and 1 or 0, since, nxt, count('SCARD', KEYS[2]), count('ZCOUNT', KEYS[3], '(' .. nowms, '+inf'),
  tonumber(v[4]) or 0, tonumber(v[5]) or 0, tonumber(v[6]) or 0, nowms, v[7] or ''}
