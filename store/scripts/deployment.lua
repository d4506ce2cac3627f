-- deployment.lua: reads the deployment's marker, creating it when it is
-- missing: a new deployment, or one whose data Redis lost.
-- KEYS[1]  the marker, "<id> <created ms>"
-- ARGV[1]  the id to write when it is missing
-- Result: {marker, created (1: this call wrote it), Redis's time in ms}.
local v = redis.call('GET', KEYS[1])
local nowms = now()
if v then return {v, 0, nowms} end
v = ARGV[1] .. ' ' .. num(nowms)
redis.call('SET', KEYS[1], v)
return {v, 1, nowms}
