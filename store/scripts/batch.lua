-- batch.lua: join the current batch run, or start one. Batch processes
-- over one item set share the run's start, so an item synced by any of
-- them after that moment counts for all.
-- KEYS[1]  the batch run marker
-- ARGV[1]  "join": return the run's start, starting a run if there is
--          none, and keep the marker alive for ARGV[2] ms;
--          "end": delete the marker if it still holds ARGV[3]
-- Result: the run's start in ms (Redis clock); for "end", 1 if deleted.
-- A marker that is not a start Redis's clock has passed is replaced.
if ARGV[1] == 'end' then
  if wrongtype(redis.pcall('GET', KEYS[1])) == ARGV[3] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
-- A run starts at a time Redis's clock has passed, written as a plain
-- decimal. Anything else (1e300, inf, a start in the future, a key of
-- another type) would make every item look synced since: start afresh.
local nowms = now()
local cur = wrongtype(redis.pcall('GET', KEYS[1]))
local since = cur and #cur <= 15 and string.match(cur, '^%d+$') and tonumber(cur)
if not since or since <= 0 or since > nowms then
  cur = num(nowms)
  redis.call('SET', KEYS[1], cur)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tonumber(cur)
