#!lua flags=no-writes
-- health.lua: the totals and sizes of a memory in one consistent read.
-- USES: meta
-- KEYS: msgs meta archive summaries recalled ixseg ixdocs ixgone facts factord
-- ARGV: (none)
-- REPLY: {fields...}
-- A flat list of field, value pairs: every field of meta (tokens, count, last_id,
-- p:<priority>:tokens, p:<priority>:count, archived, inc, fmt, ix_next, ix_docs, ...), then
-- '_msgs_len', '_archive_len', '_summaries_len', '_recalled_len', '_ixgone_len',
-- '_facts_len', '_factord_len', '_ixseg' and '_ixdocs' (1 if the key exists) and '_ttl_ms'
-- (meta's PTTL: -1 none, -2 no such key): enough for the client to tell a memory whose keys
-- were partly evicted. (Not the processes' dedupe lists, 'w:<process>': bookkeeping, and
-- long; meta holds at most one per recent writer.) A meta larger than compozy-memory writes
-- (MAX_META_FIELDS, MAX_META_FIELD_BYTES) is refused unread: COMPOZY_CORRUPT.
local out = {}
local meta = meta_all(k_meta)
for i = 1, #meta, 2 do
  if string.sub(meta[i], 1, 2) ~= 'w:' then
    out[#out + 1] = meta[i]
    out[#out + 1] = meta[i + 1]
  end
end
local sizes = {
  '_msgs_len', redis.call('LLEN', k_msgs),
  '_archive_len', redis.call('LLEN', k_archive),
  '_summaries_len', redis.call('LLEN', k_summaries),
  '_recalled_len', redis.call('LLEN', k_recalled),
  '_ixgone_len', redis.call('LLEN', k_ixgone),
  '_facts_len', redis.call('HLEN', k_facts),
  '_factord_len', redis.call('ZCARD', k_factord),
  '_ixseg', redis.call('EXISTS', k_ixseg),
  '_ixdocs', redis.call('EXISTS', k_ixdocs),
  '_ttl_ms', redis.call('PTTL', k_meta),
}
for i = 1, #sizes do
  out[#out + 1] = sizes[i]
end
return out
