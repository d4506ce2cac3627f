-- prelude.lua: helpers shared by the scripts. Each script is loaded with
-- the helpers it lists in scripts.go, in this file's order, and no
-- others (TestScriptHelpers checks the lists). Plain string and number
-- operations only, so the scripts run the same on Redis and on the
-- embedded store (which has no cmsgpack).
--
-- Record layout, 1-based (see record.go): token 5..20, fence 22..29,
-- claimed-at 31..38, heartbeat-at 40..47, state 48, attempt 50..53.
local function now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end
-- be8: the 8 big-endian bytes of a non-negative integer below 2^53;
-- be4: 4 bytes, below 2^32. One string.char each, and % and / where
-- math.floor would be a global, a field and a C call per use: these run
-- for every claimed item (be8 cost 7k instructions of Redis as two be4
-- and a concatenation, 2.6k now).
local function be4(n)
  local d = n % 256
  n = (n - d) / 256
  local c = n % 256
  n = (n - c) / 256
  local b = n % 256
  return string.char((n - b) / 256 % 256, b, c, d)
end
local function be8(n)
  local h = n % 256
  n = (n - h) / 256
  local g = n % 256
  n = (n - g) / 256
  local f = n % 256
  n = (n - f) / 256
  local e = n % 256
  n = (n - e) / 256
  local d = n % 256
  n = (n - d) / 256
  local c = n % 256
  n = (n - c) / 256
  local b = n % 256
  return string.char((n - b) / 256 % 256, b, c, d, e, f, g, h)
end
local function unbe(s)
  local n = 0
  for i = 1, #s do n = n * 256 + string.byte(s, i) end
  return n
end
local function patch(rec, at, bytes)
  return string.sub(rec, 1, at - 1) .. bytes .. string.sub(rec, at + #bytes)
end
-- times: bytes 30..47 of a record stamped at nowms (ms): claimed-at and
-- heartbeat-at, each after msgpack's uint64 marker (0xcf).
local function times(nowms)
  local t = be8(nowms)
  return '\207' .. t .. '\207' .. t
end
-- stamp writes a claim's fence (its 8 bytes, be8), times (times(), the
-- same for every item of a call) and attempt into a record template in
-- one concatenation (layout in record.go: the markers are msgpack's
-- uint64 and uint32).
local function stamp(tmpl, fence8, t, attempt)
  return string.sub(tmpl, 1, 21) .. fence8 .. t .. string.sub(tmpl, 48, 48) .. '\206' .. be4(attempt) .. string.sub(tmpl, 54)
end
-- wrongtype: the reply of a redis.pcall on a record key, with a key of
-- another type (made by hand) read as '', a record nobody can match. Any
-- other error (OOM, READONLY, ...) fails the script, as redis.call would.
local function wrongtype(v)
  if type(v) == 'table' then
    if v.err and string.find(v.err, 'WRONGTYPE', 1, true) then return '' end
    error(v)
  end
  return v
end
-- get_rec: the value at a record key, false if none (see wrongtype).
local function get_rec(rk) return wrongtype(redis.pcall('GET', rk)) end
-- is_record: whether v looks like a record syncd wrote (record.go: a
-- fixarray of 11, bin8 of 16 token bytes, at most MaxRecordSize).
local function is_record(v)
  return #v >= 53 and #v <= 512 and string.byte(v, 1) == 0x9b and string.byte(v, 3) == 0xc4 and string.byte(v, 4) == 16
end
local function token_of(rec) return string.sub(rec, 5, 20) end
-- fence_of, attempt_of: a record's fence and attempt, each read in one
-- string.byte call (a value too short for them reads as unbe reads it).
local function fence_of(rec)
  local a, b, c, d, e, f, g, h = string.byte(rec, 22, 29)
  if not h then return unbe(string.sub(rec, 22, 29)) end
  return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g) * 256 + h
end
local function attempt_of(rec)
  local a, b, c, d = string.byte(rec, 50, 53)
  if not d then return unbe(string.sub(rec, 50, 53)) end
  return ((a * 256 + b) * 256 + c) * 256 + d
end
-- num: an integer as a decimal string (tostring would use 1e+15 notation).
local function num(n) return string.format('%.0f', n) end
-- send: redis.call(unpack(t)), where t is a command with its first
-- base arguments (key, options) followed by values: one command for a
-- whole batch of fields or members instead of one each (a call from Lua
-- costs Redis thousands of instructions before any work). Past 512
-- values (Lua's unpack stops near 8000) it is sent in parts, pairs kept
-- together; the reply is then the parts' tables joined or numbers
-- summed.
local function send(t, base)
  if #t - base <= 512 then return redis.call(unpack(t)) end
  local out, sum = {}, 0
  for i = base + 1, #t, 512 do
    local part = {unpack(t, 1, base)}
    for j = i, math.min(i + 511, #t) do part[#part + 1] = t[j] end
    local r = redis.call(unpack(part))
    if type(r) == 'table' then
      for j = 1, #r do out[#out + 1] = r[j] end
    else
      sum = sum + r
    end
  end
  if #out > 0 then return out end
  return sum
end
-- The meta value of an item, 14 bytes big-endian (see meta.go): fence
-- (7 bytes, us), lastSync (6 bytes, ms) and attempts (1 byte; 4 bytes
-- from 256 on, 17 in all). Redis keeps a hash value of up to 14 bytes in
-- its smallest allocation class, 32 bytes less per item than the decimal
-- "fence:lastSync:attempts" it replaced. Absent or foreign (any other
-- length: never walked, a planted 20 MB value cost 0.93 s here) means
-- zeros, as after Redis lost data: the fence floor of take keeps fences
-- rising, and the next claim writes a valid value. meta_of decodes a
-- value (false: none); its fourth result is the value itself when
-- valid, nil otherwise.
local function meta_of(v)
  if not v or #v ~= 14 and #v ~= 17 then return 0, 0, 0 end
  local a, b, c, d, e, f, g = string.byte(v, 1, 7)
  local h, i, j, k, l, m = string.byte(v, 8, 13)
  local att = string.byte(v, 14)
  if #v == 17 then att = unbe(string.sub(v, 14)) end
  return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g),
    (((((h * 256 + i) * 256 + j) * 256 + k) * 256 + l) * 256 + m), att, v
end
-- meta_get: meta_of the value of item id in the meta HASH key.
local function meta_get(key, id)
  return meta_of(redis.call('HGET', key, id))
end
local function meta_value(f, l, a)
  -- Off the hot paths (claims and synced releases write theirs from
  -- bytes at hand): the low 7 bytes of f, the low 6 of l, attempts.
  local att
  if a < 256 then att = string.char(a) else att = be4(a) end
  return string.sub(be8(f), 2) .. string.sub(be8(l), 3) .. att
end
local function meta_set(key, id, f, l, a)
  redis.call('HSET', key, id, meta_value(f, l, a))
end
-- enc: EncodeID of keys.go, for ids the scripts find themselves: the
-- bytes { } : * ? [ ] \ % space and control characters become %XX.
local function enc(id)
  -- Most ids are letters, digits, - _ . only: one cheap class per byte
  -- (the full class below cost 9k instructions of Redis per id).
  if not string.find(id, '[^%w%-_.]') or not string.find(id, '[%c{}:*?%[%]\\%% ]') then return id end
  return (string.gsub(id, '[%c{}:*?%[%]\\%% ]', function(c) return string.format('%%%02X', string.byte(c)) end))
end
local function is_inf(score) return score == 'inf' or score == '+inf' end
-- due_ms: a due score as Redis returns it (not +inf, which callers
-- check first), in ms clamped to +-2^53 (store.MaxDue): a planted -inf
-- or 1e300 must not overflow a reply, which Redis makes an integer by a
-- cast. The embedded store's Lua reads neither '-inf' nor a dotless
-- mantissa ('2e+12', as the embedded store writes 2000000000000).
local function due_ms(score)
  local n = tonumber(score)
  if not n then
    local m, e = string.match(score, '^(-?%d+)e%+?(-?%d+)$')
    if m then
      n = tonumber(m) * 10 ^ tonumber(e)
    elseif string.byte(score) == 45 then -- '-'
      n = -9007199254740992
    else
      n = 9007199254740992
    end
  end
  return math.max(math.min(n, 9007199254740992), -9007199254740992)
end
-- The claim scripts' steps (claim_pick, claim_ids, claim_batch).
-- epoch_at: the time (ms) an epoch marker holds its shard off until, nil
-- when it is not a marker syncd writes: a plain decimal (epoch.lua),
-- read only if short, at most one ttl from now. Anything else (1e300,
-- inf, a time further ahead, garbage, '' for a key of another type) is
-- no marker to trust: the callers rewrite it to now + ttl, which holds
-- the shard one ttl, as after a data loss, and is always safe.
local function epoch_at(mark, nowms, ttl)
  local at = #mark <= 15 and string.match(mark, '^%d+$') and tonumber(mark)
  if not at or at > nowms + ttl then return nil end
  return at
end
-- claim_gate: nil when the shard may be claimed, else the claim script's
-- reply: {-1} when the epoch marker is missing (Redis lost its data; the
-- caller sets the marker with its hold-off), {-2, ms} while the shard is
-- held off, {-2, ttl, 1} when the marker was damaged and is now
-- rewritten to hold the shard off one ttl (see epoch_at).
local function claim_gate(epoch, nowms, ttl)
  local mark = wrongtype(redis.pcall('GET', epoch))
  if not mark then return {-1} end
  local at = epoch_at(mark, nowms, ttl)
  if not at then
    redis.call('SET', epoch, num(nowms + ttl))
    return {-2, ttl, 1}
  end
  if at > nowms then return {-2, at - nowms} end
  return nil
end
-- held: the record cur at rk belongs to another owner. Move item id out
-- of the due range (ZSET due) until that lease can expire, so peers stop
-- rescanning it. Returns whether the record is foreign: not one syncd
-- writes (no expiry, corrupt, oversized, another type), for the caller
-- to log.
local function held(due, rk, id, cur, ttl, nowms)
  local foreign = not is_record(cur)
  local pttl = redis.call('PTTL', rk)
  if pttl < 0 or (foreign and pttl > ttl) then
    -- Every record syncd writes expires within a ttl. One that does not
    -- was written by hand or by someone else: give it one ttl to live,
    -- so it can never block the item for longer (a planted record with
    -- a year to live held its item for the year).
    redis.call('PEXPIRE', rk, ttl)
    pttl, foreign = ttl, true
  end
  redis.call('ZADD', due, 'XX', nowms + pttl, id)
  return foreign
end
-- fence_refused: quarantine item id, whose meta value v holds a last
-- fence at or past 2^53-1 (store.MaxFence). Lua numbers are doubles: such
-- a fence cannot be raised exactly (2^53+2 stopped rising and two claims
-- got one fence), and syncd's own fences, taken from Redis TIME in us,
-- stay below it until the year 2255: the value was planted or is
-- corrupt. Says so, and how to fix it, in the err HASH, with the fence
-- as stored: its 7 bytes are split in two parts that doubles hold
-- exactly, and divided by 10^6 in turn (each step's dividend stays below
-- 2^53), since a double would print it rounded.
local function fence_refused(due, meta, errs, id, v)
  redis.call('ZADD', due, 'XX', 'inf', id)
  local a, b, c, d, e, f, g = string.byte(v, 1, 7)
  local hi, lo, dec = (a * 256 + b) * 256 + c, (((d * 256 + e) * 256 + f) * 256 + g), ''
  repeat
    local r = hi % 1000000
    hi = (hi - r) / 1000000
    local t = r * 4294967296 + lo
    r = t % 1000000
    lo = (t - r) / 1000000
    dec = string.format((hi > 0 or lo > 0) and '%06d' or '%d', r) .. dec
  until hi == 0 and lo == 0
  wrongtype(redis.pcall('HSET', errs, id, 'fence ' .. dec .. ' in ' .. meta .. ' is at or past 2^53-1, ' ..
    'which syncd never issues (planted or corrupt) and cannot raise exactly: the item is quarantined. ' ..
    'Fix: HDEL ' .. meta .. ' ' .. id .. ' (fences start again from Redis TIME in microseconds; reset a fenced ' ..
    'target that stored a higher fence for the item), then syncd requeue ' .. id))
end
-- claim_clock: what every item of one claim call stamps and sends,
-- made once per call: the record's times for stamp, and as strings the
-- ttl and the score an item is held at (now + ttl): a number argument
-- of redis.call costs Redis a printf each.
local function claim_clock(nowms, ttl)
  return {times = times(nowms), ttl = num(ttl), held = num(nowms + ttl)}
end
-- claim_one: SET NX at rk the template stamped with a fresh fence, from
-- the item's meta value v (false: none). Returns fence, attempt,
-- lastSync and the meta value to write for the claim (the new fence's 7
-- bytes before v's lastSync and attempts, as meta_value would write
-- them); or, when the item is held, nil, nil, nil and the record in the
-- way; or nil when its fence cannot be raised (fence_refused:
-- quarantined). The fence is max(last fence + 1, now in us): it keeps
-- rising even when Redis forgot the counter, as long as Redis's clock
-- does not go back. c is the call's claim_clock. The caller writes the
-- meta value and moves the item out of the due range for ttl (take, or
-- claim_pick.lua for all its items in one HSET and one ZADD).
local function claim_one(due, meta, errs, rk, id, tmpl, nowus, c, v)
  local f, l, a, valid = meta_of(v)
  if f >= 9007199254740991 then
    fence_refused(due, meta, errs, id, v)
    return nil
  end
  local fence = math.max(f + 1, nowus)
  local fence8 = be8(fence)
  local cur = wrongtype(redis.pcall('SET', rk, stamp(tmpl, fence8, c.times, a + 1), 'NX', 'PX', c.ttl, 'GET'))
  if cur then return nil, nil, nil, cur end
  return fence, a + 1, l, string.sub(fence8, 2) .. (valid and string.sub(valid, 8) or '\0\0\0\0\0\0\0')
end
-- take: claim_one for one item, with its meta read and written here.
local function take(due, meta, errs, rk, id, tmpl, nowus, c)
  local fence, attempt, last, x = claim_one(due, meta, errs, rk, id, tmpl, nowus, c, redis.call('HGET', meta, id))
  if not fence then return nil, nil, nil, x end
  redis.call('HSET', meta, id, x)
  redis.call('ZADD', due, 'XX', c.held, id)
  return fence, attempt, last
end
-- pick_head: a pick claim's reply out, ended with the shard's lowest
-- score left in the due ZSET due, so the caller knows when to come back
-- without asking again. A flag says whether there is one: any score, 0
-- and negative ones included, is a due time.
local function pick_head(out, due)
  local head = redis.call('ZRANGE', due, '0', '0', 'WITHSCORES')
  if head[2] and not is_inf(head[2]) then
    out[#out + 1] = 1
    out[#out + 1] = due_ms(head[2])
  else
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
  return out
end
-- claim_named: claim a named item whose due score was prev, if the
-- caller found it claimable (ok), and append 5 integers to out: code (1
-- claimed, or already ours with this token: a retried call whose first
-- reply was lost; 0 not claimable; -1 held by another owner; -2 held by
-- a foreign record; -3 quarantined, its fence cannot be raised), fence,
-- attempt, lastSyncMs, prev (0 when not claimable).
local function claim_named(out, ok, due, meta, errs, rk, id, tmpl, prev, ttl, nowms, nowus, c)
  local code, fence, attempt, last = 0, 0, 0, 0
  if not ok then
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = 0, 0, 0, 0, 0
    return
  end
  local cur = get_rec(rk)
  if cur and token_of(cur) == token_of(tmpl) then
    local _, l = meta_get(meta, id)
    code, fence, attempt, last = 1, fence_of(cur), attempt_of(cur), l
  elseif cur then
    code = held(due, rk, id, cur, ttl, nowms) and -2 or -1
  else
    -- No record: the SET NX cannot fail, so no fence means quarantined.
    fence, attempt, last = take(due, meta, errs, rk, id, tmpl, nowus, c)
    if fence then
      code = 1
    else
      code, fence, attempt, last = -3, 0, 0, 0
    end
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = code, fence, attempt, last, prev
end
-- own_type: deletes key when it holds another type than t (made by hand)
-- and reports whether it did. The target's keys are transient state of
-- syncd's own, safe to start afresh; failing every call instead would
-- stop the fleet over one bad key.
local function own_type(key, t)
  local cur = redis.call('TYPE', key)
  if type(cur) == 'table' then cur = cur.ok end
  if cur ~= t and cur ~= 'none' then
    redis.call('DEL', key)
    return true
  end
  return false
end
-- breaker_of: the breaker's fields open, since and next (the first
-- three values of v, an HMGET reply) as numbers, with values made by
-- hand (not numbers, NaN, far future) read as a breaker that may probe
-- now.
local function breaker_of(v, nowms, cap)
  local since, nxt = tonumber(v[2]) or nowms, tonumber(v[3]) or 0
  if nxt ~= nxt or nxt > nowms + cap then nxt = nowms end
  if since ~= since or since > nowms then since = nowms end
  return v[1] == '1', since, nxt
end
-- breaker_get: the breaker's state hash at key, read by breaker_of.
local function breaker_get(key, nowms, cap)
  return breaker_of(redis.call('HMGET', key, 'open', 'since', 'next'), nowms, cap)
end
