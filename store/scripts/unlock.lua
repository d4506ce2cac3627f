-- unlock.lua: compare-and-delete a standalone lock.
-- KEYS[1]  lock record key
-- ARGV[1]  token
-- Result: 1 released, 0 not held (no record), -1 held by another owner.
local cur = get_rec(KEYS[1])
if not cur then return 0 end
if token_of(cur) ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1])
return 1
