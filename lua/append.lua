#!lua
-- append.lua: store one or many messages at the end of a memory, atomically.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] archive  KEYS[4] summaries  (3 and 4 only with a TTL)
-- ARGV[1] ttl_ms      TTL set on every key passed; 0 leaves TTLs alone
-- ARGV[2] max_tokens  the most tokens one message may have; 0 = no limit
-- ARGV[3] n           number of messages, 1..10000
-- ARGV[4..]           n triples: tokens, priority, body (JSON object without id/ts/tokens/priority)
-- Returns {first_id, last_id, total_tokens, total_count, summary_tokens}
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE
local ttl_ms = int_arg(ARGV[1], 'ttl_ms', 0, nil)
local max_tokens = int_arg(ARGV[2], 'max_tokens', 0, nil)
local n = int_arg(ARGV[3], 'n', 1, MAX_BATCH)
local batch = validate_batch(4, n, max_tokens)

-- summary_tokens rides along (delta 0) so the caller sees the whole context's size.
local deltas = new_deltas()
deltas.summary_tokens = 0
local first_id, last_id, values = push_batch(KEYS[1], KEYS[2], 4, batch, deltas)
apply_ttl(ttl_ms)
return {first_id, last_id, values.tokens, values.count, values.summary_tokens}
