#!lua
-- flush_commit.lua: apply a flush plan atomically, or refuse it whole.
-- USES: archive args batch clock deltas envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms archive_max epoch incarnation prefix_len n_remove n_fold summary_tokens summary_body ids...
--   ttl_ms          TTL set on every key; 0 leaves TTLs alone
--   archive_max     the archive keeps at most this many originals; 0 = no cap
--   epoch           the fencing epoch of the caller's lock; must still be meta's epoch
--   incarnation     the memory's incarnation when the lock was taken; must still be meta's
--   prefix_len      P: how many of the oldest live messages the plan looked at, at most
--                   MOVE_STEP + MAX_PINNED
--   n_remove        R: how many of those it removes, at most MOVE_STEP
--   n_fold          F: 0, or all the summaries, which the new summary replaces (a rolling
--                   summary: folding only some would cover a non-contiguous span)
--   summary_tokens  tokens of the new summary (ignored without a summary body)
--   summary_body    JSON object without id/ts/tokens/priority, or '' for none
--   ids             P ids of the oldest live messages as the plan saw them, then the R ids
--                   to remove (all among those P, each indexed already), then the F ids of
--                   the summaries it saw
-- REPLY: {summary_id removed_count removed_tokens tokens count summary_tokens}
-- summary_id is 0 when there is no new summary.
-- Errors (nothing written): COMPOZY_STALE when the epoch moved on (a newer lock holder
-- exists) or the memory expired and was written again, or its server's replication history
-- changed (lib/deltas.lua: lineage: its new incarnation is written all the same); COMPOZY_MOVED when the planned
-- messages are no longer where the plan saw them, or COMPOZY_CONFLICT when the summaries
-- moved (both re-plan); COMPOZY_UNINDEXED when a message or summary to archive is not indexed
-- yet (run the indexer, re-plan); COMPOZY_INVALID, COMPOZY_FORMAT, COMPOZY_EVICTED.
-- Messages appended after the snapshot sit after the prefix and are not touched.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local epoch = int_arg(a_epoch, 'epoch', 0, nil)
local prefix_len = int_arg(a_prefix_len, 'prefix_len', 0, MOVE_STEP + MAX_PINNED)
local n_remove = int_arg(a_n_remove, 'n_remove', 0, math.min(prefix_len, MOVE_STEP))
local n_fold = int_arg(a_n_fold, 'n_fold', 0, MAX_SUMMARIES)
local summary_tokens = int_arg(a_summary_tokens, 'summary_tokens', 0, MAX_MESSAGE_TOKENS)
local summary_body = a_summary_body
local ids = ARGS_FROM - 1  -- ARGV[ids + i] is the i-th id
local n_ids = prefix_len + n_remove + n_fold
if #ARGV ~= ids + n_ids then
  fail('INVALID', 'expected ' .. (ids + n_ids) .. ' arguments, got ' .. #ARGV)
end
if summary_body ~= '' then
  json_object_arg(summary_body, 'summary body')
  if #summary_body > MAX_MESSAGE_BYTES then
    fail('TOOLARGE', 'a summary has at most ' .. MAX_MESSAGE_BYTES .. ' bytes')
  end
end
if n_fold > 0 and summary_body == '' then
  fail('INVALID', 'folding summaries needs a new summary')
end

local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'},
  {'epoch', 'ix_next', 'last_id', 'rid'}, true)
local current = tonumber(m.epoch) or 0
if current ~= epoch then
  fail('STALE', 'stale fencing epoch ' .. epoch .. ', the lock is now at ' .. current)
end
if lineage(k_meta, m) ~= a_incarnation then
  fail('STALE', 'the memory expired and was written again, or its server changed (a replica '
    .. 'was promoted), since the lock was taken')
end
local ix_next = index_next(m)
sized(k_msgs, 'msgs', tonumber(m.count) or 0, MAX_ENVELOPE_BYTES)
local prefix, heads = checked_prefix(k_msgs, ARGV, ids, prefix_len)
local remove = {}
for i = 1, n_remove do
  remove[ARGV[ids + prefix_len + i]] = true
end
local summaries = summaries_read(K)
local folded = {}
if n_fold > 0 then
  if #summaries ~= n_fold then
    fail('CONFLICT', 'the memory has ' .. #summaries .. ' summaries, the plan saw ' .. n_fold)
  end
  for i = 1, n_fold do
    local id = envelope_head(summaries[i])
    local saw = ARGV[ids + prefix_len + n_remove + i]
    if string.format('%d', id) ~= saw then
      fail('CONFLICT', 'summary ' .. i .. ' is ' .. id .. ', the plan saw ' .. saw)
    end
    check_indexed(id, 1, ix_next)
  end
  folded = summaries
elseif summary_body ~= '' and #summaries >= MAX_SUMMARIES then
  fail('INVALID', 'a memory holds at most ' .. MAX_SUMMARIES .. ' summaries: fold them')
end
local deltas = new_deltas()
local kept, removed = {}, {}
local removed_tokens = 0
for i = 1, #prefix do
  local id = string.format('%d', (envelope_head(prefix[i])))
  if remove[id] then
    if heads[i][2] == 0 then
      fail('INVALID', 'message ' .. id .. ' is pinned (priority 0) and never removed')
    end
    check_indexed(tonumber(id), heads[i][2], ix_next)
    removed[#removed + 1] = prefix[i]
    removed_tokens = removed_tokens + heads[i][1]
    account(deltas, -1, heads[i][1], heads[i][2])
    remove[id] = nil
  else
    kept[#kept + 1] = prefix[i]
  end
end
if next(remove) ~= nil then
  fail('INVALID', 'an id to remove is not among the messages the plan saw')
end

-- Checks done; writes start here.
if prefix_len > 0 then
  redis.call('LTRIM', k_msgs, prefix_len, -1)
  for i = #kept, 1, -1 do
    redis.call('LPUSH', k_msgs, kept[i])
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
  redis.call('DEL', k_summaries)
end
local summary_id = 0
local ts = now_ms()
if summary_body ~= '' then
  summary_id = redis.call('HINCRBY', k_meta, 'last_id', 1)
  -- Summaries stay oldest first: the new one covers messages newer than any kept summary.
  redis.call('RPUSH', k_summaries, envelope(summary_id, ts, summary_tokens, 1, summary_body))
  deltas.summary_tokens = (deltas.summary_tokens or 0) + summary_tokens
  deltas.summary_count = (deltas.summary_count or 0) + 1
end
deltas.flushes = 1
local last_id = summary_id > 0 and summary_id or tonumber(m.last_id) or 0
local values = apply_deltas(k_meta, deltas, nil, function()
  return {'last_flush', ts, 'ver', next_version(last_id, '')}
end)
archive_push(K, archived, archive_max)
apply_ttl(k_meta, KEYS, ttl_ms)
return {summary_id, #removed, removed_tokens, values.tokens, values.count,
  values.summary_tokens or 0}
