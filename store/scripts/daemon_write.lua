-- daemon_write.lua: write one daemon's entry in the registry.
-- KEYS[1] the registry ZSET (Keys.Daemons), KEYS[2] the daemon's key
--         (Keys.Daemon), both in the slot {daemons}
-- ARGV[1] daemon id, ARGV[2] its DaemonInfo (JSON), ARGV[3] expiry, ms
-- The key expires after ARGV[3] ms unless written again; the ZSET's
-- score is the time of this write, on Redis's clock, so readers tell a
-- heartbeat's age without comparing hosts' clocks.
-- Result: now, ms.
local nowms = now()
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[1], nowms, ARGV[1])
return nowms
