-- target_extend.lua: extends the permits a daemon holds by ttl_ms from
-- now. A permit that is gone (expired, or lost with Redis's data) is not
-- put back: another daemon may hold its place now.
-- KEYS[1]  permits ZSET
-- ARGV[1]  ttl_ms; ARGV[2..] the permits
-- Result: how many were gone.
local nowms = now()
local gone = 0
own_type(KEYS[1], 'zset')
for i = 2, #ARGV do
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', nowms + tonumber(ARGV[1]), ARGV[i]) == 0 and
      not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    gone = gone + 1
  end
end
return gone
