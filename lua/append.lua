#!lua
-- append.lua: store one or many messages at the end of a memory, atomically and at most once.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] dedupe  KEYS[4] archive  KEYS[5] summaries
--         (4 and 5 only with a TTL)
-- ARGV[1] ttl_ms      TTL set on every key passed; 0 leaves TTLs alone
-- ARGV[2] max_tokens  the most tokens one message may have; 0 = no limit
-- ARGV[3] dedupe_key  '' for none; a key already remembered means this append was stored
--                     before, and nothing is written again
-- ARGV[4] n           number of messages, 1..10000
-- ARGV[5..]           n triples: tokens, priority, body (JSON object without id/ts/tokens/priority)
-- Returns {first_id, last_id, total_tokens, total_count, summary_tokens, duplicate}; for a
-- duplicate (1) the ids are those of the first append and the totals are the current ones.
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE
local ttl_ms = int_arg(ARGV[1], 'ttl_ms', 0, nil)
local max_tokens = int_arg(ARGV[2], 'max_tokens', 0, nil)
local dedupe_key = dedupe_arg(ARGV[3])
local n = int_arg(ARGV[4], 'n', 1, MAX_BATCH)
local batch = validate_batch(5, n, max_tokens)

local seen = dedupe_seen(KEYS[3], dedupe_key)
if seen ~= nil then
  return dedupe_reply(KEYS[2], seen, n)
end

-- summary_tokens rides along (delta 0) so the caller sees the whole context's size.
local deltas = new_deltas()
deltas.summary_tokens = 0
local first_id, last_id, values = push_batch(KEYS[1], KEYS[2], 5, batch, deltas)
dedupe_record(KEYS[3], dedupe_key, first_id, last_id)
apply_ttl(ttl_ms)
return {first_id, last_id, values.tokens, values.count, values.summary_tokens, 0}
