-- lock.lua: acquire a standalone lock with SET NX PX and a fresh fence.
-- KEYS[1]  lock record key
-- KEYS[2]  lock fence counter (same slot)
-- ARGV[1]  ttl in ms
-- ARGV[2]  record template; fence, claimed-at and heartbeat-at patched here
-- Result: {1, fence} acquired (or already ours with this token: a retried
-- call); {0, pttl} held by another owner for pttl ms more.
local cur = redis.call('GET', KEYS[1])
local tmpl = ARGV[2]
if cur then
  if token_of(cur) == token_of(tmpl) then return {1, fence_of(cur)} end
  return {0, redis.call('PTTL', KEYS[1])}
end
local nowms, nowus = now()
local fence = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, nowus)
redis.call('SET', KEYS[1], stamp(tmpl, fence, nowms, unbe(string.sub(tmpl, 50, 53))), 'NX', 'PX', ARGV[1])
-- The counter outlives the lock for a week; past that the time floor
-- alone keeps fences rising.
redis.call('SET', KEYS[2], num(fence), 'PX', 604800000)
return {1, fence}
