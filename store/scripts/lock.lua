-- lock.lua: acquire a standalone lock with SET NX PX and a fresh fence.
-- KEYS[1]  lock record key
-- KEYS[2]  lock fence counter (same slot)
-- ARGV[1]  ttl in ms
-- ARGV[2]  record template; fence, claimed-at and heartbeat-at patched here
-- Result: {1, fence} acquired (or already ours with this token: a retried
-- call); {0, pttl} held by another owner for pttl ms more. A record
-- without expiry (written by hand) gets one ttl to live.
-- Three commands when the lock is free (TIME, the counter's SET ... GET,
-- SET NX ... GET), which is what a lock costs most of the time: the
-- counter moves on even when the lock turns out to be held, which only
-- spends fence values. SET with both NX and GET needs Redis 7.0.
local nowms, nowus = now()
-- The counter outlives the lock for a week; past that the time floor
-- alone keeps fences rising.
local fence = nowus
local prev = tonumber(redis.call('SET', KEYS[2], num(nowus), 'PX', 604800000, 'GET'))
if prev and prev >= nowus then
  fence = prev + 1
  redis.call('SET', KEYS[2], num(fence), 'PX', 604800000)
end
local tmpl = ARGV[2]
local cur = wrongtype(redis.pcall('SET', KEYS[1], stamp(tmpl, fence, nowms, unbe(string.sub(tmpl, 50, 53))), 'NX', 'PX', ARGV[1], 'GET'))
if not cur then return {1, fence} end
if token_of(cur) == token_of(tmpl) then return {1, fence_of(cur)} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  -- Not a lock syncd wrote (those expire): one ttl to live, as claims do.
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  pttl = tonumber(ARGV[1])
end
return {0, pttl}
