-- deployment_read.lua: reads the deployment's marker, writing nothing
-- (Config.NoCreate; deployment.lua writes a missing one).
-- KEYS[1]  the marker, "<id> <created ms>"
-- Result: {marker, or false when it is missing; Redis's time in ms}.
local nowms = now()
return {redis.call('GET', KEYS[1]), nowms}
