-- release.lua: compare-and-delete claims of one shard and record the
-- outcome, with lastSync taken from Redis's own clock.
-- KEYS[1]    due ZSET of the shard
-- KEYS[2]    meta HASH of the shard
-- KEYS[3]    err HASH of the shard
-- KEYS[4]    again HASH of the shard (trigger.lua): id -> boost ms
-- KEYS[5]    receipt of this call (Keys.ReleaseReceipt of its first item):
--            the codes it replied, kept ARGV[1] ms when it released any
-- KEYS[5+i]  record key of item i (n items: i = 1..n)
-- An item's error log LIST (Keys.ErrLog), written only on a failure, is
-- found from the due key as claim_pick.lua finds records: it shares the
-- shard's slot.
-- ARGV[1]    how long KEYS[5] is kept, ms
-- ARGV       then 5 per item i, from ARGV[5i-3]: id, token, kind, value, error
--   kind "ok"          synced: lastSync = now, attempts = 0, due at now + value ms
--   kind "fail"        attempts + 1, due at now + value ms, error kept
--   kind "quarantine"  attempts + 1, score +inf (not claimed until requeued)
--   kind "handback"    nothing recorded, due at value (absolute ms; -d: now + d)
-- Only the holder of the token changes anything; a removed item is not
-- put back into the due index. An item triggered while in flight (in
-- the again HASH) is due at now - its boost after "ok" and "handback",
-- and keeps its backoff or quarantine otherwise; the flag is cleared.
-- That costs one HLEN per call, and an HGET per item released only
-- when the HASH is not empty; an HDEL only when set.
-- A failure ("fail", "quarantine") is also pushed onto the item's error
-- log, "<ms> <fence> <error cut to 512 bytes>", kept to its 10 newest.
-- Result: 2 integers per item: code (1 released, 0 not held: no record,
-- -1 held by another owner), now in ms.
-- A call re-sent after a dropped connection (go-redis re-sends a whole
-- pipeline) finds its receipt and replies what its first send replied,
-- changing nothing: the receipt is the first send's own reply, so an
-- owner whose claim expired is never told it released. One SET per call
-- that released anything, not per item.

local n = #KEYS - 5
local prior = wrongtype(redis.pcall('GET', KEYS[5]))
if prior and prior ~= '' then
  local out, at = {}, nil
  for code in string.gmatch(prior, '-?%d+') do
    if at == nil then
      at = tonumber(code)
    else
      out[#out + 1] = tonumber(code)
      out[#out + 1] = at
    end
  end
  if #out == 2 * n then return out end
end

local nowms = now()
local out, any = {}, false
-- okraw, okdue: the last delay of a synced item and its due score as a
-- string (a number argument costs Redis a printf per call; a call's
-- items mostly share one delay).
local okraw, okdue
-- synced: a synced item's meta value after its fence: lastSync = now (6
-- bytes) and no attempts, as meta_value writes them.
local synced = string.sub(be8(nowms), 3) .. '\0'
-- Most calls find no trigger in flight: one HLEN then spares an HGET per
-- item. (HLEN, not EXISTS: the documented ACL grants it already.) A key
-- of another type counts as set; each HGET then reads it as unset.
local triggered = redis.pcall('HLEN', KEYS[4])
triggered = type(triggered) ~= 'number' or triggered > 0
-- The records released go in one DEL, before anything is recorded, and
-- the synced items' due scores in one ZADD and their meta values in one
-- HSET, after the loop: per synced item only its GET is a command of its
-- own. gone: the records released so far, so an item named twice in one
-- call is released once, as when each DEL was sent at once. held: each
-- released item's record.
local del, gone, held = {'DEL'}, {}, {}
for i = 1, n do
  local rk = KEYS[5 + i]
  local cur = not gone[rk] and get_rec(rk)
  local code = 0
  if cur and token_of(cur) == ARGV[5 * i - 2] then
    code = 1
    any = true
    gone[rk] = true
    del[#del + 1] = rk
    held[i] = cur
  elseif cur then
    code = -1
  end
  out[#out + 1] = code
  out[#out + 1] = nowms
end
-- The DEL goes first: one refused (an ACL without DEL) then leaves all as
-- it was, where the outcome used to be recorded with the claim still held
-- (so a retried release counted a failure twice). A command refused after
-- it leaves the item released with its outcome unrecorded, as a daemon
-- killed after the sync does: due again when the claim would have ended.
if any then send(del, 1) end
local zadd, okids, okmeta, okretry = {'ZADD', KEYS[1], 'XX', 'CH'}, {}, {}, {}
for i = 1, n do
  local cur = held[i]
  if cur then
    local j = 5 * i - 3
    local id, kind, msg = ARGV[j], ARGV[j + 2], ARGV[j + 4]
    -- again: the boost of a trigger while in flight, nil if none (or the
    -- key is of another type); a value trigger.lua did not write reads
    -- as 0, at most MaxTriggerBoost.
    local again = triggered and wrongtype(redis.pcall('HGET', KEYS[4], id))
    if again == '' or not again then
      again = nil
    else
      redis.call('HDEL', KEYS[4], id)
      again = tonumber(again) or 0
      if again ~= again or again < 0 or again > 60000 then again = 0 end
    end
    if kind == 'ok' then
      local due
      if again then
        due = nowms - again
      else
        if ARGV[j + 3] ~= okraw then okraw, okdue = ARGV[j + 3], num(nowms + tonumber(ARGV[j + 3])) end
        due = okdue
      end
      zadd[#zadd + 1] = due
      zadd[#zadd + 1] = id
      okids[#okids + 1] = id
      -- The record's fence (its low 7 bytes) is the meta's: the claim
      -- wrote the same to meta, and anything that raised it since
      -- (force) deleted the record. The record's attempt is the failures
      -- before it + 1.
      okmeta[#okids] = string.sub(cur, 23, 29) .. synced
      okretry[#okids] = attempt_of(cur) > 1
    elseif redis.call('ZSCORE', KEYS[1], id) then
      local value = tonumber(ARGV[j + 3])
      local f, l, a = meta_get(KEYS[2], id)
      if kind == 'fail' or kind == 'quarantine' then
        meta_set(KEYS[2], id, f, l, a + 1)
        -- A damaged err key (another type) loses the message, never the
        -- failure: the attempt is counted and quarantine still comes.
        wrongtype(redis.pcall('HSET', KEYS[3], id, msg))
        local entry = num(nowms) .. ' ' .. num(fence_of(cur)) .. ' ' .. string.sub(msg, 1, 512)
        local log = string.sub(KEYS[1], 1, -4) .. 'errlog:' .. enc(id) -- "<prefix>:{s<k>}:errlog:<id>"
        if wrongtype(redis.pcall('LPUSH', log, entry)) ~= '' then
          redis.call('LTRIM', log, 0, 9)
        end
        if kind == 'fail' then
          redis.call('ZADD', KEYS[1], nowms + value, id)
        else
          redis.call('ZADD', KEYS[1], 'inf', id)
        end
      else
        if value <= 0 then value = nowms - value end
        if again then value = math.min(value, nowms - again) end
        redis.call('ZADD', KEYS[1], value, id)
      end
    end
  end
end
-- The synced items: ZADD XX CH changed every one, or some are gone from
-- the index (removed: nothing is recorded) or, rarely, kept the same
-- score (ZSCORE tells them apart).
if #okids > 0 then
  local changed = send(zadd, 4)
  local hset = {'HSET', KEYS[2]}
  for k, id in ipairs(okids) do
    if changed == #okids or redis.call('ZSCORE', KEYS[1], id) then
      hset[#hset + 1] = id
      hset[#hset + 1] = okmeta[k]
      if okretry[k] then wrongtype(redis.pcall('HDEL', KEYS[3], id)) end
    end
  end
  if #hset > 2 then send(hset, 2) end
end
if any then
  -- The receipt: now, then each item's code. A key of another type
  -- (made by hand) is replaced: it only remembers.
  local codes = {num(nowms)}
  local text = {[1] = '1', [0] = '0', [-1] = '-1'} -- table.concat would printf each number
  for i = 1, n do codes[i + 1] = text[out[2 * i - 1]] end
  redis.call('SET', KEYS[5], table.concat(codes, ' '), 'PX', ARGV[1])
end
return out
