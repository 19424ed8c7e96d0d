#!lua
-- index_reset.lua: drop a memory's index so the indexer builds it again in bounded steps: for
-- a memory of an older data format (migrated so), when asked (a new analyser), or when its
-- search was turned off and is on again; or drop it for good, search turned off.
-- USES: args deltas meta
-- KEYS: msgs meta archive summaries ixseg ixdocs ixgone ixvec legacy_ixpost legacy_ixdocs legacy_ixp
-- ARGV: ttl_ms force off
--   ttl_ms  the memory's TTL: meta keeps its deadline (lib/deltas.lua: ttl_follow); 0 leaves
--           TTLs alone
--   force   1: rebuild even an index of this release's format; 0: only an older one, or one
--           dropped when search was turned off
--   off     1: search is off: drop the index and its vectors and keep none (meta's ix_off:
--           messages move to the archive unindexed); 0: build it
-- REPLY: {reset fmt}
--   reset  1 if the index was dropped (the indexer now rebuilds it: the live messages and
--          summaries first, then the archive from its oldest envelope), or turned off; 0 if
--          it was as asked already
-- The keys go with UNLINK, freed in the background. meta's format becomes this release's;
-- messages, summaries and the archive keep their layout from format 1 (only the index and the
-- counts below changed), so nothing else is rewritten. Format 3 keeps the index as
-- segments (lib/segments.lua) where format 2 kept postings per term (ix:p, legacy_ixp).
-- Errors: COMPOZY_FORMAT (a newer release's memory), COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local force = int_arg(a_force, 'force', 0, 1)
local off = int_arg(a_off, 'off', 0, 1)
local m = guarded(K, {'msgs', 'archive'}, {'last_id'})
local fmt = tonumber(m.fmt) or 1
if m.inc == nil or (off == 1 and m.ix_off)
    or (off == 0 and fmt >= DATA_FORMAT and force == 0 and not m.ix_off) then
  return {0, fmt}
end
redis.call('UNLINK', k_ixseg, k_ixdocs, k_ixgone, k_legacy_ixpost, k_legacy_ixdocs, k_legacy_ixp)
if off == 1 then
  redis.call('UNLINK', k_ixvec)
  redis.call('HSET', k_meta, 'fmt', DATA_FORMAT, 'ix_off', 1, 'ix_next', 0, 'ix_seq', 0,
    'ix_docs', 0, 'ix_len', 0, 'ix_gone', 0, 'ix_nseg', 0, 'vx_count', 0, 'vx_next', 0,
    'summary_count', redis.call('LLEN', k_summaries))
  redis.call('HDEL', k_meta, 'ix_an', 'vx_model', 'vx_names')
  ttl_follow(k_meta, {k_meta}, ttl_ms)
  return {1, DATA_FORMAT}
end
local archived = (tonumber(m.archived) or 0) - (tonumber(m.archive_base) or 0)
redis.call('HSET', k_meta, 'fmt', DATA_FORMAT, 'ix_next', 0,
  'ix_seq', archived > 0 and (tonumber(m.archive_base) or 0) + 1 or 0,
  'ix_docs', 0, 'ix_len', 0, 'ix_gone', 0, 'ix_nseg', 0,
  'summary_count', redis.call('LLEN', k_summaries))
-- ix_gen stays: a generation is never given twice, so a reader holding the old list reads
-- nothing of the new segments.
redis.call('HDEL', k_meta, 'ix_an', 'ix_off', 'ix_sweep', 'ix_postings', 'ix_dead',
  'ix_maxdead')
ttl_follow(k_meta, {k_meta}, ttl_ms)
return {1, DATA_FORMAT}
