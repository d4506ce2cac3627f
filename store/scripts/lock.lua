-- lock.lua: acquire standalone locks with SET NX PX and a fresh fence
-- each: one lock, or a batch of them that Store gathered from
-- concurrent Lock calls (lockBatch in locks.go), in one call.
-- ARGV[1]  '1' on the embedded store, whose data never outlives its holders
-- ARGV[2]  k, the keys per lock: 2, or 3 with the epoch marker
-- then per lock: its ttl in ms and its record template (fence,
--          claimed-at and heartbeat-at patched here)
-- KEYS, k per lock, in the same order:
--   the lock record key
--   the lock fence counter (same slot); also the lock's epoch marker
--   with k = 3: the epoch marker of the name's shard (see epoch.lua),
--   passed when it is on the same server (not in Cluster)
-- Result: two values per lock: 1, fence acquired (or already ours with
-- this token: a retried call); 0, pttl held by another owner for pttl ms
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

-- hold_off: how long a name whose fence counter is missing must wait.
-- The counter outlives every lock of its name by a week, so it is missing
-- when the name was not locked for a week or when Redis lost its data (a
-- restart without persistence) and with it, perhaps, a lock whose holder
-- still trusts its lease for up to a ttl. As claims do (claim.lua,
-- epoch.lua), the name then waits until Redis has been up for a ttl,
-- unless the shard's epoch marker, present only while no data was lost,
-- says otherwise. Runs only when the counter is missing.
local function hold_off(epoch, ttl)
  if embedded then return 0 end
  if epoch then
    local mark = redis.call('GET', epoch)
    if mark then
      local left = (tonumber(mark) or 0) - nowms
      if left ~= left or left < 0 then return 0 end -- NaN, or passed
      return math.min(left, ttl) -- a hostile 'inf' holds one ttl, not for ever
    end
  end
  if not uptime then
    uptime = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)')) or 0
  end
  -- uptime_in_seconds can read 1 a few ms after the start: take a second
  -- off, so the hold errs long (as store.MarkEpoch does).
  return math.max(ttl - math.max(uptime - 1, 0) * 1000, 0)
end

-- lock: one lock's two result values.
local function lock(rk, fk, epoch, ttlarg, tmpl)
  -- The counter outlives the lock for a week; past that the time floor
  -- alone keeps fences rising.
  local fence = nowus
  local prev = redis.call('SET', fk, nowus_s, 'PX', '604800000', 'GET')
  if not prev then
    local hold = hold_off(epoch, tonumber(ttlarg))
    if hold > 0 then
      redis.call('DEL', fk) -- the next attempt must ask again
      return -2, hold
    end
  end
  -- A counter that is not a plain decimal below 2^53 - 1 was planted or
  -- corrupted: Lua's doubles cannot raise it exactly, so two holders
  -- could get one fence. It is already replaced by the clock above;
  -- refuse this attempt loudly, and the next one takes a fence from the
  -- clock.
  if prev then
    local p = string.match(prev, '^%d+$') and tonumber(prev)
    if not p or p >= 9007199254740991 then
      return -3, 'syncd: lock fence counter ' .. fk .. ' held ' .. string.sub(prev, 1, 32) ..
        ', which cannot be raised exactly: reset to the clock, try again'
    end
    if p >= nowus then
      fence = p + 1
      redis.call('SET', fk, num(fence), 'PX', '604800000')
    end
  end
  local cur = wrongtype(redis.pcall('SET', rk, stamp(tmpl, be8(fence), times_now, attempt_of(tmpl)), 'NX', 'PX', ttlarg, 'GET'))
  if not cur then return 1, fence end
  if token_of(cur) == token_of(tmpl) then return 1, fence_of(cur) end
  local pttl = redis.call('PTTL', rk)
  if pttl < 0 then
    -- Not a lock syncd wrote (those expire): one ttl to live, as claims do.
    redis.call('PEXPIRE', rk, ttlarg)
    pttl = tonumber(ttlarg)
  end
  return 0, pttl
end

local out = {}
for i = 0, #ARGV / 2 - 2 do
  local at = i * k
  local epoch = nil
  if k == 3 then epoch = KEYS[at + 3] end
  out[2 * i + 1], out[2 * i + 2] = lock(KEYS[at + 1], KEYS[at + 2], epoch, ARGV[3 + 2 * i], ARGV[4 + 2 * i])
end
return out
