#!lua
-- index_reset.lua: drop a memory's index so the indexer builds it again in bounded steps: for
-- a memory of an older data format (migrated so), or when asked (a new analyser).
-- USES: args deltas meta
-- KEYS: msgs meta archive summaries ixpost ixdocs ixgone legacy_ixpost legacy_ixdocs
-- ARGV: ttl_ms force
--   ttl_ms  the memory's TTL: meta keeps its deadline (lib/deltas.lua: ttl_follow); 0 leaves
--           it alone
--   force   1: rebuild even an index of this release's format; 0: only an older one
-- REPLY: {reset fmt}
--   reset  1 if the index was dropped (the indexer now rebuilds it: the live messages and
--          summaries first, then the archive from its oldest envelope); 0 if it was current
-- The keys go with UNLINK, freed in the background. meta's format becomes this release's;
-- messages, summaries and the archive keep their layout from format 1 (only the index and the
-- counts below changed), so nothing else is rewritten.
-- Errors: COMPOZY_FORMAT (a newer release's memory), COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local force = int_arg(a_force, 'force', 0, 1)
local m = guarded(K, {'msgs', 'archive'}, {'last_id'})
local fmt = tonumber(m.fmt) or 1
if m.inc == nil or (fmt >= DATA_FORMAT and force == 0) then
  return {0, fmt}
end
redis.call('UNLINK', k_ixpost, k_ixdocs, k_ixgone, k_legacy_ixpost, k_legacy_ixdocs)
local archived = (tonumber(m.archived) or 0) - (tonumber(m.archive_base) or 0)
redis.call('HSET', k_meta, 'fmt', DATA_FORMAT, 'ix_next', 0,
  'ix_seq', archived > 0 and (tonumber(m.archive_base) or 0) + 1 or 0,
  'ix_docs', 0, 'ix_len', 0, 'ix_postings', 0, 'ix_dead', 0, 'ix_gone', 0, 'ix_maxdead', 0,
  'summary_count', redis.call('LLEN', k_summaries))
redis.call('HDEL', k_meta, 'ix_an', 'ix_sweep')
ttl_follow(k_meta, {k_meta}, ttl_ms)
return {1, DATA_FORMAT}
