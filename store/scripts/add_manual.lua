-- add_manual.lua: add items to one shard by hand (CLI or API): each is
-- due at once if new, and marked manual, so a reconcile never removes
-- it; `syncd items remove` does.
-- KEYS[1] due ZSET, KEYS[2] manual SET of the shard
-- ARGV    ids
-- Result: how many were new.
local nowms = now()
local n = 0
own_type(KEYS[2], 'set')
for i = 1, #ARGV do
  n = n + redis.call('ZADD', KEYS[1], 'NX', nowms, ARGV[i])
  redis.call('SADD', KEYS[2], ARGV[i])
end
return n
