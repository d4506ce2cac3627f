-- epoch.lua: set a shard's data-loss marker after a claim script found it
-- missing. The marker holds the time (ms, Redis clock) before which no
-- claim of the shard may succeed: an owner that claimed before Redis lost
-- its data may still be working until its lease would have expired.
-- KEYS[1]  epoch marker of the shard
-- ARGV[1]  hold-off in ms from now (0 for none), at most ARGV[2]
-- ARGV[2]  ttl in ms
-- Result: ms of hold-off left. The first caller's marker wins, if it is
-- one syncd writes (epoch_at); one that is not is rewritten to hold the
-- shard off one ttl.
local nowms = now()
local ttl = tonumber(ARGV[2])
local mark = wrongtype(redis.pcall('GET', KEYS[1]))
local at = mark and epoch_at(mark, nowms, ttl)
if not mark then
  at = nowms + tonumber(ARGV[1])
  redis.call('SET', KEYS[1], num(at))
elseif not at then
  at = nowms + ttl
  redis.call('SET', KEYS[1], num(at))
end
return math.max(at - nowms, 0)
