#!lua
-- replace.lua: swap the whole conversation for new messages, optionally only if unchanged.
-- USES: archive args batch dedupe envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixpost ixdocs facts factord
-- ARGV: ttl_ms max_tokens archive_max if_last_id if_incarnation dedupe_key n_old n messages...
--   ttl_ms          TTL set on every key; 0 leaves TTLs alone
--   max_tokens      the most tokens one message may have; 0 = no limit
--   archive_max     the archive keeps at most this many originals; 0 = no cap
--   if_last_id      replace only if meta last_id equals this; -1 = unconditionally
--   if_incarnation  with if_last_id: and only if the memory is this incarnation; '' = any
--   dedupe_key      '' for none; as for append.lua, a remembered key writes nothing
--   n_old           how many live messages the caller read
--   n               number of new messages, 0..MAX_BATCH
--   messages        the n_old ids the caller read, then their n_old index terms (see
--                   archive() in _lib.lua), then n triples: tokens, priority, body (as for
--                   append.lua)
-- Returns: {first_id, last_id, total_tokens, total_count, summary_tokens, duplicate,
--          incarnation}; first_id > last_id when n = 0. Summaries are left as they are.
-- The replaced originals go to the archive (and its index); the new messages get fresh ids.
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE, COMPOZY_CONFLICT (if_last_id
-- or if_incarnation did not hold), COMPOZY_MOVED (the live messages are not the ones the
-- caller read: read again and retry)
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local max_tokens = int_arg(a_max_tokens, 'max_tokens', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local if_last_id = int_arg(a_if_last_id, 'if_last_id', -1, nil)
local dedupe_key = dedupe_arg(a_dedupe_key)
local n_old = int_arg(a_n_old, 'n_old', 0, nil)
local n = int_arg(a_n, 'n', 0, MAX_BATCH)
local olds = ARGS_FROM - 1
local batch = validate_batch(ARGV, ARGS_FROM + 2 * n_old, n, max_tokens)
local seen = dedupe_seen(k_meta, k_dedupe, dedupe_key)
if seen ~= nil then
  return dedupe_reply(k_meta, seen, n)
end
local _, count, last_id = totals(k_meta)
if if_last_id >= 0 then
  if if_last_id ~= last_id then
    fail('CONFLICT', 'expected last_id ' .. if_last_id .. ', found ' .. last_id)
  end
  local inc = redis.call('HGET', k_meta, 'inc') or ''
  if a_if_incarnation ~= '' and a_if_incarnation ~= inc then
    fail('CONFLICT', 'the memory expired and was written again since last_id '
      .. if_last_id .. ' was read')
  end
end
if count ~= n_old then
  fail('MOVED', 'the memory holds ' .. count .. ' messages, the caller read ' .. n_old)
end
local old = redis.call('LRANGE', k_msgs, 0, -1)
local old_terms = {}
for i = 1, #old do
  local id = envelope_head(old[i])
  if string.format('%d', id) ~= ARGV[olds + i] then
    fail('MOVED', 'message ' .. i .. ' is ' .. id .. ', the caller read ' .. ARGV[olds + i])
  end
  old_terms[i] = ARGV[olds + n_old + i]
end

if #old > 0 then
  archive(K, old, old_terms, archive_max)
  redis.call('DEL', k_msgs)
end
local fields = redis.call('HKEYS', k_meta)
for i = 1, #fields do
  if string.sub(fields[i], 1, 2) == 'p:' then
    redis.call('HDEL', k_meta, fields[i])
  end
end
redis.call('HSET', k_meta, 'tokens', 0, 'count', 0)
local deltas = new_deltas()
deltas.summary_tokens = 0
deltas.replaced = 1
local first_id, values
first_id, last_id, values = push_batch(k_msgs, k_meta, batch, deltas)
dedupe_record(k_meta, k_dedupe, dedupe_key, last_id + 1 - n, last_id)
apply_ttl(KEYS, ttl_ms)
return {first_id, last_id, values.tokens, values.count, values.summary_tokens, 0, values.inc}
