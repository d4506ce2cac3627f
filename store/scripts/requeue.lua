-- requeue.lua: make items due now and forget their failures (brings
-- quarantined items back).
-- KEYS[1] due ZSET, KEYS[2] meta HASH, KEYS[3] err HASH of the shard
-- ARGV     ids
-- Result: how many items exist.
local nowms = now()
local n = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score then
    n = n + 1
    if is_inf(score) or due_ms(score) > nowms then
      redis.call('ZADD', KEYS[1], 'XX', nowms, id)
    end
    local f, l = meta_get(KEYS[2], id)
    if f > 0 or l > 0 then meta_set(KEYS[2], id, f, l, 0) end
    -- A damaged err key (another type) loses messages, never the requeue
    -- (release.lua does the same): it used to fail half done.
    wrongtype(redis.pcall('HDEL', KEYS[3], id))
  end
end
return n
