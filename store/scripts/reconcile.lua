-- reconcile.lua: one chunk of a reconcile of one shard, fenced: the
-- reconciler's lock fence must not be below the highest one a reconcile
-- of this shard wrote, so a paused ex-leader cannot undo a newer
-- reconcile.
-- KEYS[1] due ZSET, KEYS[2] meta HASH, KEYS[3] err HASH, KEYS[4] manual
--         SET (items added by hand), KEYS[5] the shard's reconcile fence,
--         KEYS[3+i] (remove only) the error log LIST of ARGV[i], i >= 3
-- ARGV[1] fence, ARGV[2] add | remove, ARGV[3..] ids
--   add     adds each id (due now) that is not in the set
--   remove  removes each id that was not added by hand
-- Result: {1 applied or 0 refused, how many changed}.
local f = tonumber(ARGV[1])
local cur = tonumber(wrongtype(redis.pcall('GET', KEYS[5]))) or 0
-- A value no reconcile wrote (beyond exact doubles, inf) would refuse
-- every reconcile for ever.
if cur ~= cur or cur >= 9007199254740991 then cur = 0 end
if cur > f then return {0, 0} end
redis.call('SET', KEYS[5], num(f))
local n = 0
if ARGV[2] == 'add' then
  local nowms = now()
  for i = 3, #ARGV do
    n = n + redis.call('ZADD', KEYS[1], 'NX', nowms, ARGV[i])
  end
else
  own_type(KEYS[4], 'set')
  for i = 3, #ARGV do
    if redis.call('SISMEMBER', KEYS[4], ARGV[i]) == 0 then
      n = n + redis.call('ZREM', KEYS[1], ARGV[i])
      redis.call('HDEL', KEYS[2], ARGV[i])
      wrongtype(redis.pcall('HDEL', KEYS[3], ARGV[i])) -- a damaged err key loses messages only
      redis.call('DEL', KEYS[3 + i])
    end
  end
end
return {1, n}
