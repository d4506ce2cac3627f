-- due.lua: the longest-waiting due items of one shard.
-- KEYS[1]  due ZSET of the shard
-- ARGV[1]  how many at most
-- Result: ids whose score <= now (Redis clock), lowest score first.
local nowms = now()
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nowms, 'LIMIT', 0, tonumber(ARGV[1]))
