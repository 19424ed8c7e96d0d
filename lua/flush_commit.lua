#!lua
-- flush_commit.lua: apply a flush plan atomically, or refuse it whole.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] archive  KEYS[4] summaries  KEYS[5] dedupe
-- Returns {summary_id (0 if none), removed_count, removed_tokens, tokens, count,
--          summary_tokens}
-- ARGV[1] ttl_ms        TTL set on every key; 0 leaves TTLs alone
-- ARGV[2] archive_max   the archive keeps at most this many originals; 0 = no cap
-- ARGV[3] epoch         the fencing epoch of the caller's lock; must still be meta's epoch
-- ARGV[4] prefix_len    P: how many of the oldest live messages the plan looked at
-- ARGV[5] n_remove      R: how many of those it removes
-- ARGV[6] n_fold        F: 0, or all the summaries, which the new summary replaces (a
--                       rolling summary: folding only some would cover a non-contiguous span)
-- ARGV[7] summary_tokens     tokens of the new summary (ignored without a summary body)
-- ARGV[8] summary_body       JSON object without id/ts/tokens/priority, or '' for none
-- ARGV[9 .. 8+P]             the ids of the P oldest live messages, as the plan saw them
-- ARGV[9+P .. 8+P+R]         the ids to remove, all among those P
-- ARGV[9+P+R .. 8+P+R+F]     the ids of the F oldest summaries, as the plan saw them
-- Errors (nothing written): COMPOZY_STALE when the epoch moved on (a newer lock holder
-- exists); COMPOZY_CONFLICT when the planned messages are no longer where the plan saw them;
-- COMPOZY_INVALID.
-- Messages appended after the snapshot sit after the prefix and are not touched.
local ttl_ms = int_arg(ARGV[1], 'ttl_ms', 0, nil)
local archive_max = int_arg(ARGV[2], 'archive_max', 0, nil)
local epoch = int_arg(ARGV[3], 'epoch', 0, nil)
local prefix_len = int_arg(ARGV[4], 'prefix_len', 0, nil)
local n_remove = int_arg(ARGV[5], 'n_remove', 0, prefix_len)
local n_fold = int_arg(ARGV[6], 'n_fold', 0, nil)
local summary_tokens = int_arg(ARGV[7], 'summary_tokens', 0, nil)
local summary_body = ARGV[8]
if #ARGV ~= 8 + prefix_len + n_remove + n_fold then
  fail('INVALID', 'expected ' .. (8 + prefix_len + n_remove + n_fold) .. ' arguments, got '
    .. #ARGV)
end
if summary_body ~= '' and (string.sub(summary_body, 1, 2) ~= '{"'
    or string.sub(summary_body, -1) ~= '}') then
  fail('INVALID', 'summary body must be a JSON object or empty')
end
if n_fold > 0 and summary_body == '' then
  fail('INVALID', 'folding summaries needs a new summary')
end

local current = tonumber(redis.call('HGET', KEYS[2], 'epoch')) or 0
if current ~= epoch then
  fail('STALE', 'stale fencing epoch ' .. epoch .. ', the lock is now at ' .. current)
end
local prefix = redis.call('LRANGE', KEYS[1], 0, prefix_len - 1)
if #prefix ~= prefix_len then
  fail('CONFLICT', 'the memory has fewer messages than the plan saw')
end
local heads = {}
for i = 1, prefix_len do
  local id, tokens, priority = envelope_head(prefix[i])
  if string.format('%d', id) ~= ARGV[8 + i] then
    fail('CONFLICT', 'message ' .. i .. ' is ' .. id .. ', the plan saw ' .. ARGV[8 + i])
  end
  heads[i] = {tokens, priority}
end
local remove = {}
for i = 1, n_remove do
  remove[ARGV[8 + prefix_len + i]] = true
end
local folded = {}
if n_fold > 0 then
  folded = redis.call('LRANGE', KEYS[4], 0, -1)
  if #folded ~= n_fold then
    fail('CONFLICT', 'the memory has ' .. #folded .. ' summaries, the plan saw ' .. n_fold)
  end
  for i = 1, n_fold do
    local id = envelope_head(folded[i])
    if string.format('%d', id) ~= ARGV[8 + prefix_len + n_remove + i] then
      fail('CONFLICT', 'summary ' .. i .. ' is ' .. id .. ', the plan saw '
        .. ARGV[8 + prefix_len + n_remove + i])
    end
  end
end

local kept, removed = {}, {}
local deltas = new_deltas()
local removed_tokens = 0
for i = 1, prefix_len do
  if remove[ARGV[8 + i]] then
    removed[#removed + 1] = prefix[i]
    removed_tokens = removed_tokens + heads[i][1]
    account(deltas, -1, heads[i][1], heads[i][2])
    remove[ARGV[8 + i]] = nil
  else
    kept[#kept + 1] = prefix[i]
  end
end
if next(remove) ~= nil then
  fail('INVALID', 'an id to remove is not among the prefix the plan saw')
end

-- Checks done; writes start here.
if prefix_len > 0 then
  redis.call('LTRIM', KEYS[1], prefix_len, -1)
  for i = #kept, 1, -1 do
    redis.call('LPUSH', KEYS[1], kept[i])
  end
end
local archived = {}
for i = 1, #folded do
  archived[#archived + 1] = folded[i]
  local _, t = envelope_head(folded[i])
  deltas.summary_tokens = (deltas.summary_tokens or 0) - t
  deltas.summary_count = (deltas.summary_count or 0) - 1
end
for i = 1, #removed do
  archived[#archived + 1] = removed[i]
end
if n_fold > 0 then
  redis.call('DEL', KEYS[4])
end
local summary_id = 0
local now = redis.call('TIME')
local ts = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if summary_body ~= '' then
  summary_id = redis.call('HINCRBY', KEYS[2], 'last_id', 1)
  -- Summaries stay oldest first: the new one covers messages newer than any kept summary.
  redis.call('RPUSH', KEYS[4], string.format('{"id":%d,"ts":%d,"tokens":%d,"priority":%d,',
    summary_id, ts, summary_tokens, 1) .. string.sub(summary_body, 2))
  deltas.summary_tokens = (deltas.summary_tokens or 0) + summary_tokens
  deltas.summary_count = (deltas.summary_count or 0) + 1
end
if #archived > 0 then
  archive(KEYS[3], archived, archive_max)
end
deltas.archived = #archived
deltas.flushes = 1
local values = apply_deltas(KEYS[2], deltas)
redis.call('HSET', KEYS[2], 'last_flush', ts)
apply_ttl(ttl_ms)
return {summary_id, #removed, removed_tokens, values.tokens, values.count,
  values.summary_tokens or 0}
