#!lua
-- flush_commit.lua: apply a flush plan atomically, or refuse it whole.
-- USES: archive args batch clock envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixpost ixdocs facts factord
-- ARGV: ttl_ms archive_max epoch incarnation prefix_len n_remove n_fold summary_tokens summary_body ids...
--   ttl_ms          TTL set on every key; 0 leaves TTLs alone
--   archive_max     the archive keeps at most this many originals; 0 = no cap
--   epoch           the fencing epoch of the caller's lock; must still be meta's epoch
--   incarnation     the memory's incarnation when the lock was taken; must still be meta's
--   prefix_len      P: how many of the oldest live messages the plan looked at
--   n_remove        R: how many of those it removes
--   n_fold          F: 0, or all the summaries, which the new summary replaces (a rolling
--                   summary: folding only some would cover a non-contiguous span)
--   summary_tokens  tokens of the new summary (ignored without a summary body)
--   summary_body    JSON object without id/ts/tokens/priority, or '' for none
--   ids             P ids of the oldest live messages as the plan saw them, then the R ids
--                   to remove (all among those P), then the F ids of the summaries it saw,
--                   then R index terms, one per id to remove, in the same order (see
--                   archive() in _lib.lua)
-- Returns: {summary_id (0 if none), removed_count, removed_tokens, tokens, count,
--          summary_tokens}
-- Errors (nothing written): COMPOZY_STALE when the epoch moved on (a newer lock holder
-- exists) or the memory expired and was written again; COMPOZY_MOVED when the planned
-- messages are no longer where the plan saw them, or COMPOZY_CONFLICT when the summaries
-- moved (both re-plan); COMPOZY_INVALID.
-- Messages appended after the snapshot sit after the prefix and are not touched.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local epoch = int_arg(a_epoch, 'epoch', 0, nil)
local prefix_len = int_arg(a_prefix_len, 'prefix_len', 0, nil)
local n_remove = int_arg(a_n_remove, 'n_remove', 0, prefix_len)
local n_fold = int_arg(a_n_fold, 'n_fold', 0, nil)
local summary_tokens = int_arg(a_summary_tokens, 'summary_tokens', 0, MAX_MESSAGE_TOKENS)
local summary_body = a_summary_body
local ids = ARGS_FROM - 1  -- ARGV[ids + i] is the i-th id
local n_ids = prefix_len + n_remove + n_fold
if #ARGV ~= ids + n_ids + n_remove then
  fail('INVALID', 'expected ' .. (ids + n_ids + n_remove) .. ' arguments, got ' .. #ARGV)
end
if summary_body ~= '' then
  json_object_arg(summary_body, 'summary body')
end
if n_fold > 0 and summary_body == '' then
  fail('INVALID', 'folding summaries needs a new summary')
end

local state = redis.call('HMGET', k_meta, 'epoch', 'inc')
local current = tonumber(state[1]) or 0
if current ~= epoch then
  fail('STALE', 'stale fencing epoch ' .. epoch .. ', the lock is now at ' .. current)
end
if state[2] ~= a_incarnation then
  fail('STALE', 'the memory expired and was written again since the lock was taken')
end
local prefix, heads = checked_prefix(k_msgs, ARGV, ids, prefix_len)
local remove = {}
for i = 1, n_remove do
  remove[ARGV[ids + prefix_len + i]] = ARGV[ids + n_ids + i]
end
local folded = {}
if n_fold > 0 then
  folded = redis.call('LRANGE', k_summaries, 0, -1)
  if #folded ~= n_fold then
    fail('CONFLICT', 'the memory has ' .. #folded .. ' summaries, the plan saw ' .. n_fold)
  end
  for i = 1, n_fold do
    local id = envelope_head(folded[i])
    local saw = ARGV[ids + prefix_len + n_remove + i]
    if string.format('%d', id) ~= saw then
      fail('CONFLICT', 'summary ' .. i .. ' is ' .. id .. ', the plan saw ' .. saw)
    end
  end
end
local deltas = new_deltas()
local kept, removed, terms, removed_tokens = split_prefix(prefix, heads, remove, deltas, false)

-- Checks done; writes start here.
if prefix_len > 0 then
  rewrite_head(k_msgs, prefix_len, kept)
end
local archived, archived_terms = {}, {}
for i = 1, #folded do
  archived[#archived + 1] = folded[i]
  archived_terms[#archived_terms + 1] = ''  -- summaries are not indexed
  local _, t = envelope_head(folded[i])
  deltas.summary_tokens = (deltas.summary_tokens or 0) - t
  deltas.summary_count = (deltas.summary_count or 0) - 1
end
for i = 1, #removed do
  archived[#archived + 1] = removed[i]
  archived_terms[#archived_terms + 1] = terms[i]
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
if #archived > 0 then
  archive(K, archived, archived_terms, archive_max)
end
deltas.flushes = 1
local values = apply_deltas(k_meta, deltas)
redis.call('HSET', k_meta, 'last_flush', ts)
apply_ttl(KEYS, ttl_ms)
return {summary_id, #removed, removed_tokens, values.tokens, values.count,
  values.summary_tokens or 0}
