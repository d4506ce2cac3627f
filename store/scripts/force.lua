-- force.lua: admin release of a stuck claim. Deletes the record whoever
-- holds it and raises the item's fence, so a fenced sink rejects the old
-- owner's late writes; the item is due at once.
-- KEYS[1] due ZSET, KEYS[2] meta HASH, KEYS[3] record key of the item
-- ARGV[1] id
-- Result: {existed (1/0), held (1/0), new fence}; {-1, 0, 0} when the
-- item's fence is at or past 2^53-1, which cannot be raised exactly (see
-- fence_refused in prelude.lua): then nothing is changed.
local nowms, nowus = now()
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[1], id) then return {0, 0, 0} end
local f, l, a = meta_get(KEYS[2], id)
if f >= 9007199254740991 then return {-1, 0, 0} end
local held = redis.call('DEL', KEYS[3])
local fence = math.max(f + 1, nowus)
meta_set(KEYS[2], id, fence, l, a)
redis.call('ZADD', KEYS[1], 'XX', nowms, id)
return {1, held, fence}
