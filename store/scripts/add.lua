-- add.lua: add items to one shard; each is due at once.
-- KEYS[1]  due ZSET of the shard
-- ARGV     ids
-- Result: how many were new.
local nowms = now()
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('ZADD', KEYS[1], 'NX', nowms, ARGV[i])
end
return n
