-- remove.lua: remove items from one shard. A claim in flight stays until
-- its owner releases it (release does not re-add a removed item).
-- KEYS[1] due ZSET, KEYS[2] meta HASH, KEYS[3] err HASH, KEYS[4] manual
--         SET, KEYS[5] trig HASH, KEYS[6] again HASH of the shard,
--         KEYS[6+i] error log LIST of ARGV[i]
-- ARGV     ids
-- Result: how many were present.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
  wrongtype(redis.pcall('HDEL', KEYS[3], ARGV[i])) -- a damaged err key loses messages only
  wrongtype(redis.pcall('SREM', KEYS[4], ARGV[i]))
  wrongtype(redis.pcall('HDEL', KEYS[5], ARGV[i]))
  wrongtype(redis.pcall('HDEL', KEYS[6], ARGV[i]))
  redis.call('DEL', KEYS[6 + i])
end
return n
