-- claim.lua: claim items of one shard with SET NX PX and a fresh fence.
-- KEYS[1]    due ZSET of the shard
-- KEYS[2]    meta HASH of the shard
-- KEYS[3]    epoch marker of the shard
-- KEYS[3+i]  record key of item i
-- ARGV[1]    ttl in ms
-- ARGV[2]    "due": claim only items whose score <= now; "any": any item
--            that is in the due index and not quarantined; "batch": items
--            whose lastSync is before ARGV[3], at once unless they are
--            failing (attempts > 0) and not due yet (backing off)
-- ARGV[3]    batch mode: the run's start, ms on Redis's clock
-- ARGV[2+2i] id of item i
-- ARGV[3+2i] record template of item i; fence, claimed-at, heartbeat-at
--            and attempt are patched in here
-- Result: {-1} when the epoch marker is missing (Redis lost its data; the
-- caller sets the marker with its hold-off), {-2, ms} while the shard is
-- held off; otherwise 5 integers per item:
--   code (1 claimed or already ours with this token, 0 not due, unknown or
--   quarantined, -1 held by another owner), fence, attempt, lastSyncMs,
--   score before the claim.
-- The fence is max(last fence + 1, now in us): it keeps rising even when
-- Redis forgot the counter, as long as Redis's clock does not go back.
local mark = redis.call('GET', KEYS[3])
if not mark then return {-1} end
local nowms, nowus = now()
local hold = tonumber(mark) or 0
if hold > nowms then return {-2, hold - nowms} end

local ttl = tonumber(ARGV[1])
local mode = ARGV[2]
local since = tonumber(ARGV[3])
-- claimable: whether an item with this score may be claimed in this mode.
local function claimable(id, score)
  if not score or is_inf(score) then return false end
  local s = tonumber(score)
  if mode == 'due' then return s <= nowms end
  if mode == 'batch' then
    local _, l, a = meta_get(KEYS[2], id)
    return l < since and (a == 0 or s <= nowms)
  end
  return true
end
local out = {}
for i = 1, #KEYS - 3 do
  local id, tmpl, rk = ARGV[2 + 2 * i], ARGV[3 + 2 * i], KEYS[3 + i]
  local tok = token_of(tmpl)
  local code, fence, attempt, last, prev = 0, 0, 0, 0, 0
  local score = redis.call('ZSCORE', KEYS[1], id)
  if claimable(id, score) then
    prev = tonumber(score)
    local cur = redis.call('GET', rk)
    if cur and token_of(cur) == tok then
      -- A retried call whose first reply was lost: the claim is ours.
      local _, l = meta_get(KEYS[2], id)
      code, fence, attempt, last = 1, fence_of(cur), attempt_of(cur), l
    elseif cur then
      -- In flight elsewhere: move it out of the due range until that
      -- lease can expire, so peers stop rescanning it.
      code = -1
      local pttl = redis.call('PTTL', rk)
      if pttl < 0 then
        -- Every record syncd writes expires. One that does not was written
        -- by hand or by someone else: give it one ttl to live, so it can
        -- never block the item forever.
        redis.call('PEXPIRE', rk, ttl)
        pttl = ttl
      end
      redis.call('ZADD', KEYS[1], 'XX', nowms + pttl, id)
    else
      local f, l, a = meta_get(KEYS[2], id)
      fence = math.max(f + 1, nowus)
      attempt = a + 1
      if redis.call('SET', rk, stamp(tmpl, fence, nowms, attempt), 'NX', 'PX', ttl) then
        meta_set(KEYS[2], id, fence, l, a)
        redis.call('ZADD', KEYS[1], 'XX', nowms + ttl, id)
        code, last = 1, l
      else
        fence, attempt = 0, 0
      end
    end
  end
  out[#out + 1] = code
  out[#out + 1] = fence
  out[#out + 1] = attempt
  out[#out + 1] = last
  out[#out + 1] = prev
end
return out
