#!lua
-- replace.lua: swap the whole conversation for new messages, optionally only if unchanged.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] archive  KEYS[4] summaries  KEYS[5] dedupe
-- ARGV[1] ttl_ms         TTL set on every key; 0 leaves TTLs alone
-- ARGV[2] max_tokens     the most tokens one message may have; 0 = no limit
-- ARGV[3] archive_max    the archive keeps at most this many originals; 0 = no cap
-- ARGV[4] if_last_id     replace only if meta last_id equals this; -1 = unconditionally
-- ARGV[5] dedupe_key     '' for none; as for append.lua, a remembered key writes nothing
-- ARGV[6] n              number of new messages, 0..10000
-- ARGV[7..]              n triples: tokens, priority, body (as for append.lua)
-- Returns {first_id, last_id, total_tokens, total_count, summary_tokens, duplicate};
-- first_id > last_id when n = 0. Summaries are left as they are.
-- The replaced originals go to the archive; the new messages get fresh ids.
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE, COMPOZY_CONFLICT
local ttl_ms = int_arg(ARGV[1], 'ttl_ms', 0, nil)
local max_tokens = int_arg(ARGV[2], 'max_tokens', 0, nil)
local archive_max = int_arg(ARGV[3], 'archive_max', 0, nil)
local if_last_id = int_arg(ARGV[4], 'if_last_id', -1, nil)
local dedupe_key = dedupe_arg(ARGV[5])
local n = int_arg(ARGV[6], 'n', 0, MAX_BATCH)
local batch = validate_batch(7, n, max_tokens)
local seen = dedupe_seen(KEYS[5], dedupe_key)
if seen ~= nil then
  return dedupe_reply(KEYS[2], seen, n)
end
local _, _, last_id = totals(KEYS[2])
if if_last_id >= 0 and if_last_id ~= last_id then
  fail('CONFLICT', 'expected last_id ' .. if_last_id .. ', found ' .. last_id)
end

local old = redis.call('LRANGE', KEYS[1], 0, -1)
if #old > 0 then
  archive(KEYS[3], old, archive_max)
  redis.call('DEL', KEYS[1])
end
local fields = redis.call('HKEYS', KEYS[2])
for i = 1, #fields do
  if string.sub(fields[i], 1, 2) == 'p:' then
    redis.call('HDEL', KEYS[2], fields[i])
  end
end
redis.call('HSET', KEYS[2], 'tokens', 0, 'count', 0)
local deltas = new_deltas()
deltas.summary_tokens = 0
deltas.archived = #old
deltas.replaced = 1
local first_id, values
first_id, last_id, values = push_batch(KEYS[1], KEYS[2], 7, batch, deltas)
dedupe_record(KEYS[5], dedupe_key, last_id + 1 - n, last_id)
apply_ttl(ttl_ms)
return {first_id, last_id, values.tokens, values.count, values.summary_tokens, 0}
