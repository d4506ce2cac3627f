-- claim.lua: claim items of one shard with SET NX PX and a fresh fence.
-- KEYS[1]    due ZSET of the shard
-- KEYS[2]    meta HASH of the shard
-- KEYS[3]    epoch marker of the shard
-- ARGV[1]    ttl in ms
-- ARGV[2]    mode:
--   "pick"   claim the longest-waiting due items (score <= now) the
--            script finds itself, one per template; the ids claimed are
--            also written to the receipt key KEYS[4] (for ttl ms), so a
--            caller whose reply was lost can learn what it claimed
--   "due"    claim the given items whose score <= now
--   "any"    the given items that are in the due index, not quarantined
--   "batch"  the given items whose lastSync is before ARGV[3], at once
--            unless they are failing (attempts > 0) and not due yet
-- ARGV[3]    batch mode: the run's start, ms on Redis's clock
-- pick mode:     ARGV[3+i]  record template i
-- other modes:   KEYS[3+i]  record key of item i
--                ARGV[2+2i] id of item i, ARGV[3+2i] its record template
-- A template's fence, claimed-at, heartbeat-at and attempt are patched in
-- here.
-- Result: {-1} when the epoch marker is missing (Redis lost its data; the
-- caller sets the marker with its hold-off), {-2, ms} while the shard is
-- held off. Pick mode: 5 values per item claimed, in due order: id, fence,
-- attempt, lastSyncMs, score before the claim; an item held by a foreign
-- record (see held) comes as id, -1, 0, 0, 0 and takes no template; one
-- more value ends the reply: the lowest due score left in the shard (ms),
-- 0 when there is none.
-- Other modes: 5 integers per item: code (1 claimed or already ours with
-- this token, 0 not due, unknown or quarantined, -1 held by another
-- owner, -2 held by a foreign record), fence, attempt, lastSyncMs, score
-- before the claim.
-- The fence is max(last fence + 1, now in us): it keeps rising even when
-- Redis forgot the counter, as long as Redis's clock does not go back.
local mark = redis.call('GET', KEYS[3])
if not mark then return {-1} end
local nowms, nowus = now()
local hold = tonumber(mark) or 0
if hold > nowms then return {-2, hold - nowms} end

local ttl = tonumber(ARGV[1])
local mode = ARGV[2]

-- held: the record cur at rk belongs to another owner. Move the item out
-- of the due range until that lease can expire, so peers stop rescanning
-- it. Returns whether the record is foreign: not one syncd writes (no
-- expiry, corrupt, oversized, another type), for the caller to log.
local function held(rk, id, cur)
  local foreign = not is_record(cur)
  local pttl = redis.call('PTTL', rk)
  if pttl < 0 then
    -- Every record syncd writes expires. One that does not was written
    -- by hand or by someone else: give it one ttl to live, so it can
    -- never block the item forever.
    redis.call('PEXPIRE', rk, ttl)
    pttl, foreign = ttl, true
  end
  redis.call('ZADD', KEYS[1], 'XX', nowms + pttl, id)
  return foreign
end

-- take: SET NX the stamped record; on success the fence is remembered and
-- the item leaves the due range for ttl. Returns fence, attempt, lastSync;
-- or, when the item is held, nil, nil, nil and the record in the way.
local function take(rk, id, tmpl)
  local f, l, a = meta_get(KEYS[2], id)
  local fence = math.max(f + 1, nowus)
  local cur = wrongtype(redis.pcall('SET', rk, stamp(tmpl, fence, nowms, a + 1), 'NX', 'PX', ttl, 'GET'))
  if cur then return nil, nil, nil, cur end
  redis.call('HSET', KEYS[2], id, meta_value(fence, l, a))
  redis.call('ZADD', KEYS[1], 'XX', nowms + ttl, id)
  return fence, a + 1, l
end

local out = {}
if mode == 'pick' then
  local n = #ARGV - 3
  local cand = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nowms, 'WITHSCORES', 'LIMIT', 0, n)
  local recs = string.sub(KEYS[1], 1, -4) .. 'rec:' -- "<prefix>:{s<k>}:rec:"
  local got = {}
  for i = 1, #cand, 2 do
    local id = cand[i]
    local rk = recs .. enc(id)
    local fence, attempt, last, cur = take(rk, id, ARGV[4 + #got])
    if fence then
      got[#got + 1] = id
      out[#out + 1] = id
      out[#out + 1] = fence
      out[#out + 1] = attempt
      out[#out + 1] = last
      out[#out + 1] = tonumber(cand[i + 1])
    elseif held(rk, id, cur) then
      out[#out + 1] = id
      out[#out + 1] = -1
      out[#out + 1] = 0
      out[#out + 1] = 0
      out[#out + 1] = 0
    end
  end
  if #got > 0 then
    redis.call('SET', KEYS[4], table.concat(got, '\n'), 'PX', ttl)
  end
  -- Last, the shard's lowest score left (0: none, or only quarantined),
  -- so the caller knows when to come back without asking again.
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if head[2] and not is_inf(head[2]) then
    out[#out + 1] = math.max(tonumber(head[2]), 1) -- never read as {-1}
  else
    out[#out + 1] = 0
  end
  return out
end

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
for i = 1, #KEYS - 3 do
  local id, tmpl, rk = ARGV[2 + 2 * i], ARGV[3 + 2 * i], KEYS[3 + i]
  local code, fence, attempt, last, prev = 0, 0, 0, 0, 0
  local score = redis.call('ZSCORE', KEYS[1], id)
  if claimable(id, score) then
    prev = tonumber(score)
    local cur = get_rec(rk)
    if cur and token_of(cur) == token_of(tmpl) then
      -- A retried call whose first reply was lost: the claim is ours.
      local _, l = meta_get(KEYS[2], id)
      code, fence, attempt, last = 1, fence_of(cur), attempt_of(cur), l
    elseif cur then
      code = held(rk, id, cur) and -2 or -1
    else
      fence, attempt, last = take(rk, id, tmpl)
      if fence then
        code = 1
      else
        fence, attempt, last = 0, 0, 0
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
