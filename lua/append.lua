#!lua
-- append.lua: store one or many messages at the end of a memory, atomically and at most once.
-- USES: args batch clock dedupe deltas
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms max_tokens dedupe_key n messages...
--   ttl_ms      the memory's TTL: every key of it expires at one deadline, moved when due
--               (lib/deltas.lua: ttl_deadline); 0 leaves TTLs alone
--   max_tokens  the most tokens one message may have; 0 = no limit
--   dedupe_key  '' for none; a key already remembered means this append was stored before,
--               and nothing is written again
--   n           number of messages, 1..MAX_BATCH
--   messages    n triples: tokens, priority, body: tokens and priority in decimal digits,
--               body the JSON object without id/ts/tokens/priority and without its opening
--               '{' (the envelope puts it back; at most MAX_MESSAGE_BYTES each with it,
--               MAX_CALL_BYTES in all)
-- REPLY: {first_id last_id total_tokens total_count summary_tokens duplicate incarnation version}
-- For a duplicate (1) the ids are those of the first append and the totals are the current
-- ones. Nothing is indexed here: the indexer picks the new messages up (lib/index.lua).
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE, COMPOZY_FORMAT (a newer
-- release's memory), COMPOZY_EVICTED (keys of the memory are gone)
-- The client sends every number in digits: a comparison of text reads the usual ones.
local ttl_ms = a_ttl_ms == '0' and 0 or int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local max_tokens = a_max_tokens == '0' and 0 or int_arg(a_max_tokens, 'max_tokens', 0, nil)
local dedupe_key = dedupe_arg(a_dedupe_key)
local n = a_n == '1' and 1 or int_arg(a_n, 'n', 1, MAX_BATCH)
local batch = validate_batch(ARGV, ARGS_FROM, n, max_tokens)

-- One HMGET reads the totals, the checks' fields and the dedupe record; one HSET writes them.
local own, process, counter = dedupe_token(dedupe_key)
local field = process and 'w:' .. process
-- The process's dedupe record is sized before it is read (one written raw is refused).
dedupe_sized(k_meta, field)
local m = batch_read(K, batch, field)
local seen, record = dedupe_seen(K, own, process, counter, field and m[field],
  m.last_id)
if seen ~= nil then
  return dedupe_reply(k_meta, seen, n)
end
-- A new memory (no meta): none of these may exist, or its meta was evicted.
batch_check(K, batch, m, m.inc == nil and {'msgs', 'archive', 'summaries', 'ixdocs', 'facts'})
local ts, us = now_texts()
local first_id, last_id, created, last = batch_push(K, batch, m, ts)
local more = {}
local dedupe_created = dedupe_record(K, own, process, counter, record, first_id, last_id, more,
  last)
local tokens, count, summary_tokens, inc, ver = batch_meta(K, batch, m, last, dedupe_key, us,
  more)
-- Every key at the memory's deadline: all of them when it moves, else those this created.
if ttl_ms > 0 then
  apply_ttl_created(k_meta, KEYS, ttl_ms, tonumber(ts), created and k_msgs,
    dedupe_created and k_dedupe)
end
return {first_id, last_id, tokens, count, summary_tokens, 0, inc, ver}
