#!lua
-- import.lua: write a transcript's envelopes, with their own ids and times, into a memory
-- that holds none.
-- USES: archive args envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixpost ixdocs facts factord
-- ARGV: ttl_ms archive_max n_msgs n_summaries n_archive items...
--   ttl_ms        TTL set on every key; 0 leaves TTLs alone
--   archive_max   the archive's cap, as for trim.lua
--   n_msgs, n_summaries, n_archive   how many envelopes of each part follow
--   items         the live messages' envelopes, then the summaries', then for each archived
--                 original its envelope and its index terms (as trim.lua takes them; ''
--                 for a folded summary); each part in its list's order, live ids increasing
-- Returns: {count, last_id}: live messages and the memory's last id after the import.
-- Errors (nothing written): COMPOZY_CONFLICT when the memory holds messages, summaries or
-- archived originals, or has given out ids at or past the transcript's first;
-- COMPOZY_INVALID for an envelope without its id/ts/tokens/priority head or out of order.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local n_msgs = int_arg(a_n_msgs, 'n_msgs', 0, nil)
local n_summaries = int_arg(a_n_summaries, 'n_summaries', 0, nil)
local n_archive = int_arg(a_n_archive, 'n_archive', 0, nil)
if #ARGV ~= ARGS_FROM - 1 + n_msgs + n_summaries + 2 * n_archive then
  fail('INVALID', 'the counts do not match the envelopes sent')
end
if redis.call('LLEN', k_msgs) + redis.call('LLEN', k_summaries)
    + redis.call('LLEN', k_archive) > 0 then
  fail('CONFLICT', 'import needs an empty memory: this one holds messages')
end
local current = tonumber(redis.call('HGET', k_meta, 'last_id')) or 0
local low, high = nil, current
local function head(env, what)
  if not string.match(env, ENVELOPE_HEAD) or string.sub(env, -1) ~= '}' then
    fail('INVALID', what .. ' is not an envelope: ' .. string.sub(env, 1, 60))
  end
  local id, tokens, priority = envelope_head(env)
  if priority > MAX_PRIORITY or tokens > MAX_MESSAGE_TOKENS then
    fail('INVALID', what .. ' has a priority or token count out of range')
  end
  low = math.min(low or id, id)
  high = math.max(high, id)
  return id, tokens, priority
end
local deltas = new_deltas()
deltas.summary_tokens = 0
local msgs, summaries, archived, terms = {}, {}, {}, {}
local previous = 0
for i = 1, n_msgs do
  local env = ARGV[ARGS_FROM + i - 1]
  local id, tokens, priority = head(env, 'message ' .. i)
  if id <= previous then
    fail('INVALID', 'message ids must increase: ' .. id .. ' after ' .. previous)
  end
  previous = id
  account(deltas, 1, tokens, priority)
  msgs[i] = env
end
for i = 1, n_summaries do
  local env = ARGV[ARGS_FROM + n_msgs + i - 1]
  local _, tokens = head(env, 'summary ' .. i)
  deltas.summary_tokens = deltas.summary_tokens + tokens
  summaries[i] = env
end
for i = 1, n_archive do
  -- The archive keeps the order things were archived in (folded summaries among them),
  -- which need not be id order.
  local at = ARGS_FROM + n_msgs + n_summaries + 2 * (i - 1)
  head(ARGV[at], 'archived message ' .. i)
  archived[i] = ARGV[at]
  terms[i] = ARGV[at + 1]
end
if low ~= nil and low <= current then
  fail('CONFLICT', 'this memory has given out ids up to ' .. current
    .. '; the transcript starts at ' .. low)
end
deltas.last_id = high - current
local values = apply_deltas(k_meta, deltas)
for i = 1, #msgs, 512 do
  redis.call('RPUSH', k_msgs, unpack(msgs, i, math.min(i + 511, #msgs)))
end
for i = 1, #summaries, 512 do
  redis.call('RPUSH', k_summaries, unpack(summaries, i, math.min(i + 511, #summaries)))
end
if #archived > 0 then
  archive(K, archived, terms, archive_max)
end
apply_ttl(KEYS, ttl_ms)
return {values.count, values.last_id}
