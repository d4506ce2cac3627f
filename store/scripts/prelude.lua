-- prelude.lua: helpers prepended to every script at load time. Plain
-- string and number operations only, so the scripts run the same on Redis
-- and on the embedded store (which has no cmsgpack).
--
-- Record layout, 1-based (see record.go): token 5..20, fence 22..29,
-- claimed-at 31..38, heartbeat-at 40..47, state 48, attempt 50..53.
local function now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end
-- be8: the 8 big-endian bytes of a non-negative integer below 2^53;
-- be4: 4 bytes. No tables: these run for every claimed item.
local function be4(n)
  local d = n % 16777216
  return string.char(math.floor(n / 16777216) % 256, math.floor(d / 65536), math.floor(d / 256) % 256, d % 256)
end
local function be8(n)
  local lo = n % 4294967296
  return be4(math.floor(n / 4294967296)) .. be4(lo)
end
local function unbe(s)
  local n = 0
  for i = 1, #s do n = n * 256 + string.byte(s, i) end
  return n
end
local function patch(rec, at, bytes)
  return string.sub(rec, 1, at - 1) .. bytes .. string.sub(rec, at + #bytes)
end
-- stamp writes a claim's fence, claimed-at, heartbeat-at and attempt
-- into a record template in one concatenation (layout in record.go).
local function stamp(tmpl, fence, nowms, attempt)
  local t = be8(nowms)
  return string.sub(tmpl, 1, 21) .. be8(fence) .. string.sub(tmpl, 30, 30) .. t ..
    string.sub(tmpl, 39, 39) .. t .. string.sub(tmpl, 48, 49) .. be4(attempt) .. string.sub(tmpl, 54)
end
local function token_of(rec) return string.sub(rec, 5, 20) end
local function fence_of(rec) return unbe(string.sub(rec, 22, 29)) end
local function attempt_of(rec) return unbe(string.sub(rec, 50, 53)) end
-- num: an integer as a decimal string (tostring would use 1e+15 notation).
local function num(n) return string.format('%.0f', n) end
-- meta value "fence:lastSyncMs:attempts"; absent or foreign means zeros.
local function meta_get(key, id)
  local v = redis.call('HGET', key, id)
  if not v then return 0, 0, 0 end
  local f, l, a = string.match(v, '^(%d+):(%d+):(%d+)$')
  if not f then return 0, 0, 0 end
  return tonumber(f), tonumber(l), tonumber(a)
end
local function meta_set(key, id, f, l, a)
  redis.call('HSET', key, id, num(f) .. ':' .. num(l) .. ':' .. num(a))
end
local function is_inf(score) return score == 'inf' or score == '+inf' end
