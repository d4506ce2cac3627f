-- epoch.lua: set a shard's data-loss marker after a claim script found it
-- missing. The marker holds the time (ms, Redis clock) before which no
-- claim of the shard may succeed: an owner that claimed before Redis lost
-- its data may still be working until its lease would have expired.
-- KEYS[1]  epoch marker of the shard
-- ARGV[1]  hold-off in ms from now (0 for none)
-- Result: ms of hold-off left (the first caller's marker wins).
local nowms = now()
redis.call('SET', KEYS[1], num(nowms + tonumber(ARGV[1])), 'NX')
local hold = (tonumber(redis.call('GET', KEYS[1])) or 0) - nowms
if hold < 0 then hold = 0 end
return hold
