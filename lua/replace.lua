#!lua
-- replace.lua: swap the whole conversation for new messages, optionally only if unchanged.
-- USES: archive args batch dedupe deltas envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms max_tokens archive_max if_last_id if_incarnation if_version dedupe_key n messages...
--   ttl_ms          the memory's TTL, on every key (lib/deltas.lua); 0 leaves TTLs alone
--   max_tokens      the most tokens one message may have; 0 = no limit
--   archive_max     the archive keeps at most this many originals; 0 = no cap
--   if_last_id      replace only if meta last_id equals this; -1 = unconditionally
--   if_incarnation  and only if the memory is this incarnation, in this server's replication
--                   history (lib/deltas.lua: lineage); '' = any
--   if_version      and only if meta's version (lib/batch.lua) is this; '' = any
--   dedupe_key      '' for none; as for append.lua, a remembered key writes nothing
--   n               number of new messages, 0..MAX_BATCH
--   messages        n triples: tokens, priority, body (as for append.lua)
-- REPLY: {first_id last_id total_tokens total_count summary_tokens duplicate incarnation version}
-- first_id > last_id when n = 0. Summaries are left as they are. The replaced originals go
-- to the archive; the new messages get fresh ids.
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE, COMPOZY_CONFLICT (a condition
-- did not hold; when the server's replication history changed, the memory's new incarnation
-- is written all the same), COMPOZY_LONG (more than MOVE_STEP live messages: move the oldest to the
-- archive with trim.lua first), COMPOZY_UNINDEXED (run the indexer first), COMPOZY_FORMAT,
-- COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local max_tokens = int_arg(a_max_tokens, 'max_tokens', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local if_last_id = int_arg(a_if_last_id, 'if_last_id', -1, nil)
local dedupe_key = dedupe_arg(a_dedupe_key)
local n = int_arg(a_n, 'n', 0, MAX_BATCH)
local batch = validate_batch(ARGV, ARGS_FROM, n, max_tokens)
local own, process, counter = dedupe_token(dedupe_key)
dedupe_sized(k_meta, process and 'w:' .. process)
local prior = redis.call('HMGET', k_meta, 'last_id', process and 'w:' .. process or 'last_id')
local seen, record = dedupe_seen(K, own, process, counter, process and prior[2] or nil,
  tonumber(prior[1]) or 0)
if seen ~= nil then
  return dedupe_reply(k_meta, seen, n)
end
local m = guarded(K, {'msgs', 'archive', 'index', 'ixgone'},
  {'last_id', 'ix_next', 'ver', 'rid'}, true)
local last_id = tonumber(m.last_id) or 0
if if_last_id >= 0 and if_last_id ~= last_id then
  fail('CONFLICT', 'expected last_id ' .. if_last_id .. ', found ' .. last_id)
end
if a_if_incarnation ~= '' then
  -- Checked against the server's replication history: after a failover the memory has a new
  -- incarnation (lib/deltas.lua: lineage), written even though this call is refused.
  local inc, moved = lineage(k_meta, m)
  if a_if_incarnation ~= (inc or '') then
    fail('CONFLICT', moved and 'the memory\'s server changed since it was read (a replica '
      .. 'was promoted, or the server lost its replication state): read it again'
      or 'the memory expired and was written again since it was read')
  end
end
if a_if_version ~= '' and a_if_version ~= version_of(m) then
  fail('CONFLICT', 'the memory was written since version ' .. a_if_version .. ' was read')
end
local count = tonumber(m.count) or 0
if count > MOVE_STEP then
  fail('LONG', 'the memory holds ' .. count .. ' live messages; a replace moves at most '
    .. MOVE_STEP .. ' at once')
end
local old = envelopes_read(k_msgs, 'a message', 0, -1, count)
local ix_next = index_next(m)
for i = 1, #old do
  local id, _, priority = envelope_head(old[i])
  check_indexed(id, priority, ix_next)
end
local fields = redis.call('HKEYS', k_meta)  -- sized by guarded
local stale = {}
for i = 1, #fields do
  if string.sub(fields[i], 1, 2) == 'p:' then
    stale[#stale + 1] = fields[i]
  end
end

-- Checks done; writes start here.
if #old > 0 then
  redis.call('DEL', k_msgs)
end
if #stale > 0 then
  redis.call('HDEL', k_meta, unpack(stale))
end
redis.call('HSET', k_meta, 'tokens', 0, 'count', 0, 'pins', ',')
local first_id, tokens, summary_tokens, inc, ver
first_id, last_id, tokens, count, summary_tokens, inc, ver = push_batch(K, batch, {}, dedupe_key,
  'replaced')
archive_push(K, old, archive_max)
local fields = {}
dedupe_record(K, own, process, counter, record, last_id + 1 - n, last_id, fields)
if #fields > 0 then
  redis.call('HSET', k_meta, unpack(fields))
end
apply_ttl(k_meta, KEYS, ttl_ms)
return {first_id, last_id, tokens, count, summary_tokens, 0, inc, ver}
