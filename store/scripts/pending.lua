-- pending.lua: one page of a shard's items that a batch run still has to
-- sync, in due order (longest waiting first).
-- KEYS[1]  due ZSET of the shard
-- KEYS[2]  meta HASH of the shard
-- ARGV[1]  the run's start, ms on Redis's clock
-- ARGV[2]  offset into the due index
-- ARGV[3]  page size
-- Result: {next offset (-1 at the end), quarantined on this page,
--   backing off on this page, ids...}: ids are items not quarantined
--   whose lastSync is before the run's start.
local nowms = now()
local since = tonumber(ARGV[1])
local off, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local page = redis.call('ZRANGE', KEYS[1], off, off + n - 1, 'WITHSCORES')
local out = {-1, 0, 0}
if #page / 2 == n then out[1] = off + n end
for i = 1, #page, 2 do
  local id, score = page[i], page[i + 1]
  if is_inf(score) then
    out[2] = out[2] + 1
  else
    local _, l, a = meta_get(KEYS[2], id)
    if l < since then
      out[#out + 1] = id
      if a > 0 and due_ms(score) > nowms then out[3] = out[3] + 1 end
    end
  end
end
return out
