#!lua
-- append.lua: store one or many messages at the end of a memory, atomically and at most once.
-- USES: args batch dedupe deltas
-- KEYS: msgs meta archive summaries dedupe recalled ixpost ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms max_tokens dedupe_key n messages...
--   ttl_ms      TTL set on every key passed; 0 leaves TTLs alone
--   max_tokens  the most tokens one message may have; 0 = no limit
--   dedupe_key  '' for none; a key already remembered means this append was stored before,
--               and nothing is written again
--   n           number of messages, 1..MAX_BATCH
--   messages    n triples: tokens, priority, body (JSON object without id/ts/tokens/priority;
--               at most MAX_MESSAGE_BYTES each, MAX_CALL_BYTES in all)
-- REPLY: {first_id last_id total_tokens total_count summary_tokens duplicate incarnation version}
-- For a duplicate (1) the ids are those of the first append and the totals are the current
-- ones. Nothing is indexed here: the indexer picks the new messages up (lib/index.lua).
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE, COMPOZY_FORMAT (a newer
-- release's memory), COMPOZY_EVICTED (keys of the memory are gone)
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local max_tokens = int_arg(a_max_tokens, 'max_tokens', 0, nil)
local dedupe_key = dedupe_arg(a_dedupe_key)
local n = int_arg(a_n, 'n', 1, MAX_BATCH)
local batch = validate_batch(ARGV, ARGS_FROM, n, max_tokens)

local seen = dedupe_seen(k_meta, k_dedupe, dedupe_key)
if seen ~= nil then
  return dedupe_reply(k_meta, seen, n)
end

-- summary_tokens rides along (delta 0) so the caller sees the whole context's size.
local deltas = new_deltas()
deltas.summary_tokens = 0
local first_id, last_id, values = push_batch(K, batch, deltas,
  {'msgs', 'archive', 'summaries', 'ixdocs', 'facts'}, dedupe_key)
dedupe_record(k_meta, k_dedupe, dedupe_key, first_id, last_id)
apply_ttl(k_meta, KEYS, ttl_ms)
return {first_id, last_id, values.tokens, values.count, values.summary_tokens, 0, values.inc,
  values.ver}
