-- lock.lua: acquire standalone locks with SET NX PX and a fresh fence
-- each: one lock, or a batch of them that Store gathered from
-- concurrent Lock calls (lockOps in locks.go), in one call.
-- ARGV[1]  '1' on the embedded store, whose data never outlives its holders
-- ARGV[2]  k, the keys per lock: 2, or 3 with the epoch marker
-- then per lock: its ttl in ms and its record template (fence,
--          claimed-at and heartbeat-at patched here)
-- KEYS, k per lock, in the same order:
--   the lock record key
--   the lock fence counter (same slot); also the lock's epoch marker
--   with k = 3: the epoch marker of the name's shard (see epoch.lua),
--   passed when it is on the same server (not in Cluster)
-- Result: two values per lock (for one lock acquired or held, one
-- integer: see the end): 1, fence acquired (or already ours with this
-- token: a retried call); 0, pttl held by another owner for pttl ms
-- more (0: it expires within this millisecond); -2, ms held off for ms
-- more because Redis lost its data (see hold_off); -3, why: refused, its
-- fence counter cannot be raised exactly. A record without expiry
-- (written by hand) gets one ttl to live. The locks are taken in order,
-- so a name twice in one call is granted to the first only.
-- Three commands per free lock (the counter's SET ... GET, SET NX ...
-- GET, and one TIME for the call), which is what a lock costs most of
-- the time: the counter moves on even when the lock turns out to be
-- held, which only spends fence values. SET with both NX and GET needs
-- Redis 7.0.
local nowms, nowus = now()
local times_now, nowus_s = times(nowms), num(nowus)
local embedded, k = ARGV[1] == '1', tonumber(ARGV[2])
local uptime -- INFO's uptime_in_seconds, read once per call if needed

-- hold_off: how long a name whose fence counter is missing must wait,
-- and the uptime read for it. The counter outlives every lock of its
-- name by a week, so it is missing when the name was not locked for a
-- week or when Redis lost its data (a restart without persistence) and
-- with it, perhaps, a lock whose holder still trusts its lease for up to
-- a ttl. As claims do (claim.lua, epoch.lua), the name then waits until
-- Redis has been up for a ttl, unless the shard's epoch marker, present
-- only while no data was lost, says otherwise. Runs only when the
-- counter is missing. Everything comes in as arguments: a function that
-- reads the script's locals costs Redis an upvalue each per call.
local function hold_off(epoch, ttl, nowms, up)
  if epoch then
    local mark = redis.call('GET', epoch)
    if mark then
      local left = (tonumber(mark) or 0) - nowms
      if left ~= left or left < 0 then return 0, up end -- NaN, or passed
      return math.min(left, ttl), up -- a hostile 'inf' holds one ttl, not for ever
    end
  end
  up = up or tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)')) or 0
  -- uptime_in_seconds can read 1 a few ms after the start: take a second
  -- off, so the hold errs long (as store.MarkEpoch does).
  return math.max(ttl - math.max(up - 1, 0) * 1000, 0), up
end

-- Each lock in turn, written out here rather than in a function for
-- the same reason; `break` ends a lock's turn with its two values set.
local out = {}
for i = 0, #ARGV / 2 - 2 do
  local at, code, v = i * k, 0, 0
  local rk, fk, ttlarg, tmpl = KEYS[at + 1], KEYS[at + 2], ARGV[3 + 2 * i], ARGV[4 + 2 * i]
  repeat
    -- The counter outlives the lock for a week; past that the time
    -- floor alone keeps fences rising.
    local fence = nowus
    local prev = redis.call('SET', fk, nowus_s, 'PX', '604800000', 'GET')
    if not prev and not embedded then
      local epoch = nil
      if k == 3 then epoch = KEYS[at + 3] end
      local hold
      hold, uptime = hold_off(epoch, tonumber(ttlarg), nowms, uptime)
      if hold > 0 then
        redis.call('DEL', fk) -- the next attempt must ask again
        code, v = -2, hold
        break
      end
    end
    -- A counter that is not a plain decimal below 2^53 - 1 was planted
    -- or corrupted: Lua's doubles cannot raise it exactly, so two
    -- holders could get one fence. It is already replaced by the clock
    -- above; refuse this attempt loudly, and the next one takes a fence
    -- from the clock.
    if prev then
      local p = string.match(prev, '^%d+$') and tonumber(prev)
      if not p or p >= 9007199254740991 then
        code, v = -3, 'syncd: lock fence counter ' .. fk .. ' held ' .. string.sub(prev, 1, 32) ..
          ', which cannot be raised exactly: reset to the clock, try again'
        break
      end
      if p >= nowus then
        fence = p + 1
        redis.call('SET', fk, num(fence), 'PX', '604800000')
      end
    end
    -- The template's attempt is already in place (MarshalRecord writes
    -- the header's fixed layout): only the fence and times are new.
    local rec = string.sub(tmpl, 1, 21) .. be8(fence) .. times_now .. string.sub(tmpl, 48)
    local cur = wrongtype(redis.pcall('SET', rk, rec, 'NX', 'PX', ttlarg, 'GET'))
    if not cur then
      code, v = 1, fence
    elseif token_of(cur) == token_of(tmpl) then
      code, v = 1, fence_of(cur)
    else
      v = redis.call('PTTL', rk)
      if v < 0 then
        -- Not a lock syncd wrote (those expire): one ttl to live, as
        -- claims do.
        redis.call('PEXPIRE', rk, ttlarg)
        v = tonumber(ttlarg)
      end
    end
  until true
  out[2 * i + 1], out[2 * i + 2] = code, v
end
-- One lock, as at low load nearly every call carries: one integer, the
-- fence when acquired (never 0: it comes from the clock or a counter
-- at or above it) or -1 - pttl when held, because a table reply costs
-- Redis a reply length written afterwards and its own reply buffer.
if #out == 2 then
  if out[1] == 1 and out[2] > 0 then return out[2] end
  if out[1] == 0 then return -1 - out[2] end
end
return out
