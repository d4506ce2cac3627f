-- lock.lua: acquire a standalone lock with SET NX PX and a fresh fence.
-- KEYS[1]  lock record key
-- KEYS[2]  lock fence counter (same slot); also the lock's epoch marker
-- KEYS[3]  optional: the epoch marker of the name's shard (see epoch.lua),
--          passed when it is on the same server (not in Cluster)
-- ARGV[1]  ttl in ms
-- ARGV[2]  record template; fence, claimed-at and heartbeat-at patched here
-- ARGV[3]  '1' on the embedded store, whose data never outlives its holders
-- Result: {1, fence} acquired (or already ours with this token: a retried
-- call); {0, pttl} held by another owner for pttl ms more (0: it expires
-- within this millisecond); {-2, ms} held off for ms more because Redis
-- lost its data (see hold_off). A record without expiry (written by
-- hand) gets one ttl to live.
-- Three commands when the lock is free (TIME, the counter's SET ... GET,
-- SET NX ... GET), which is what a lock costs most of the time: the
-- counter moves on even when the lock turns out to be held, which only
-- spends fence values. SET with both NX and GET needs Redis 7.0.
local nowms, nowus = now()
local ttl = tonumber(ARGV[1])

-- hold_off: how long a name whose fence counter is missing must wait.
-- The counter outlives every lock of its name by a week, so it is missing
-- when the name was not locked for a week or when Redis lost its data (a
-- restart without persistence) and with it, perhaps, a lock whose holder
-- still trusts its lease for up to a ttl. As claims do (claim.lua,
-- epoch.lua), the name then waits until Redis has been up for a ttl,
-- unless the shard's epoch marker, present only while no data was lost,
-- says otherwise. Runs only when the counter is missing.
local function hold_off()
  if ARGV[3] == '1' then return 0 end
  if KEYS[3] then
    local mark = redis.call('GET', KEYS[3])
    if mark then
      local left = (tonumber(mark) or 0) - nowms
      if left ~= left or left < 0 then return 0 end -- NaN, or passed
      return math.min(left, ttl) -- a hostile 'inf' holds one ttl, not for ever
    end
  end
  local up = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)')) or 0
  -- uptime_in_seconds can read 1 a few ms after the start: take a second
  -- off, so the hold errs long (as store.MarkEpoch does).
  return math.max(ttl - math.max(up - 1, 0) * 1000, 0)
end

-- The counter outlives the lock for a week; past that the time floor
-- alone keeps fences rising.
local fence = nowus
local prev = redis.call('SET', KEYS[2], num(nowus), 'PX', '604800000', 'GET')
if not prev then
  local hold = hold_off()
  if hold > 0 then
    redis.call('DEL', KEYS[2]) -- the next attempt must ask again
    return {-2, hold}
  end
end
-- A counter that is not a plain decimal below 2^53 - 1 was planted or
-- corrupted: Lua's doubles cannot raise it exactly, so two holders could
-- get one fence. It is already replaced by the clock above; refuse this
-- attempt loudly, and the next one takes a fence from the clock.
if prev and not (string.match(prev, '^%d+$') and tonumber(prev) < 9007199254740991) then
  return redis.error_reply('syncd: lock fence counter ' .. KEYS[2] .. ' held ' .. string.sub(prev, 1, 32) ..
    ', which cannot be raised exactly: reset to the clock, try again')
end
prev = tonumber(prev)
if prev and prev >= nowus then
  fence = prev + 1
  redis.call('SET', KEYS[2], num(fence), 'PX', '604800000')
end
local tmpl = ARGV[2]
local cur = wrongtype(redis.pcall('SET', KEYS[1], stamp(tmpl, be8(fence), times(nowms), attempt_of(tmpl)), 'NX', 'PX', ARGV[1], 'GET'))
if not cur then return {1, fence} end
if token_of(cur) == token_of(tmpl) then return {1, fence_of(cur)} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  -- Not a lock syncd wrote (those expire): one ttl to live, as claims do.
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  pttl = ttl
end
return {0, pttl}
