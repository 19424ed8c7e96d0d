#!lua
-- index_apply.lua: one bounded step of the indexer: index what index_pending.lua returned,
-- take removed documents' terms out of the document frequencies.
-- USES: archive args deltas envelope index meta
-- KEYS: msgs meta archive summaries ixpost ixdocs ixgone ixvec
-- ARGV: ttl_ms archive_max analyzer ix_next upto seq_from seq_upto n_gone gone_first n_add documents...
--   ttl_ms       the memory's TTL: the keys written get its deadline (lib/deltas.lua:
--                ttl_follow); 0 leaves TTLs alone
--   archive_max  the archive's cap, enforced a step at a time here too (it may have shrunk)
--   analyzer     the analyser version the terms were made with; must be the index's
--   ix_next      meta's ix_next as index_pending.lua returned it (the step applies only if
--                no other indexer moved it meanwhile)
--   upto         ix_next moves past this id
--   seq_from     meta's ix_seq as returned (0: no rebuild); seq_upto: it moves past this seq
--   n_gone       removed documents whose terms follow; gone_first: the id of the first (the
--                head of ixgone as returned), 0 when n_gone is 0
--   n_add        documents to index, then the n_gone removed ones; each argument
--                'id<TAB>kind<TAB>length<TAB>seq<TAB>term<TAB>tf...' (lib/index.lua): at most
--                INDEX_STEP_DOCS of each, INDEX_STEP_POSTINGS postings in all
-- REPLY: {applied ix_next ix_seq indexed dead_postings postings}
--   applied  1; 0 when another indexer got there first (nothing written: read again)
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_CONFLICT (the analyser differs: rebuild
-- the index), COMPOZY_FORMAT, COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local expected_next = int_arg(a_ix_next, 'ix_next', 0, nil)
local upto = int_arg(a_upto, 'upto', 0, nil)
local seq_from = int_arg(a_seq_from, 'seq_from', 0, nil)
local seq_upto = int_arg(a_seq_upto, 'seq_upto', 0, nil)
local n_gone = int_arg(a_n_gone, 'n_gone', 0, INDEX_STEP_DOCS)
local gone_first = int_arg(a_gone_first, 'gone_first', 0, nil)
local n_add = int_arg(a_n_add, 'n_add', 0, INDEX_STEP_DOCS)
if #ARGV ~= ARGS_FROM - 1 + n_add + n_gone then
  fail('INVALID', 'expected ' .. (n_add + n_gone) .. ' documents, got ' .. (#ARGV - ARGS_FROM + 1))
end
local budget = {postings = 0}
local adds = parse_documents(ARGV, ARGS_FROM, n_add, false, budget)
local gones = parse_documents(ARGV, ARGS_FROM + n_add, n_gone, true, budget)
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'},
  {'ix_next', 'ix_seq', 'ix_an', 'ix_len', 'ix_postings', 'ix_dead'})
if (tonumber(m.fmt) or 1) < DATA_FORMAT then
  return {0, 0, 0, 0, 0, 0}
end
if (m.ix_an or a_analyzer) ~= a_analyzer then
  fail('CONFLICT', 'the index was built with analyser ' .. m.ix_an .. ', these terms with '
    .. a_analyzer .. ': rebuild the index')
end
local ix_next = tonumber(m.ix_next) or 0
local ix_seq = tonumber(m.ix_seq) or 0
local stale = ix_next ~= expected_next or ix_seq ~= seq_from
if n_gone > 0 then
  local head = redis.call('LINDEX', k_ixgone, 0)
  stale = stale or not head or envelope_head(head) ~= gone_first
    or redis.call('LLEN', k_ixgone) < n_gone
end
if stale then
  return {0, ix_next, ix_seq, 0, 0, tonumber(m.ix_postings) or 0}
end

local n_docs, length, postings = index_documents(K, adds)
local dead = unindex_documents(K, gones)
if n_gone > 0 then
  redis.call('LTRIM', k_ixgone, n_gone, -1)
end
if upto >= ix_next then
  ix_next = upto + 1
end
if seq_from > 0 then
  ix_seq = seq_upto + 1
  if ix_seq > (tonumber(m.archived) or 0) then
    ix_seq = 0  -- the rebuild reached the archive's end
  end
end
local total_postings = (tonumber(m.ix_postings) or 0) + postings
local total_dead = (tonumber(m.ix_dead) or 0) + dead
redis.call('HSET', k_meta, 'ix_next', ix_next, 'ix_seq', ix_seq, 'ix_an', a_analyzer,
  'ix_docs', (tonumber(m.ix_docs) or 0) + n_docs, 'ix_len', (tonumber(m.ix_len) or 0) + length,
  'ix_postings', total_postings, 'ix_dead', total_dead,
  'ix_gone', (tonumber(m.ix_gone) or 0) - n_gone)
archive_cap(K, archive_max)
ttl_follow(k_meta, KEYS, ttl_ms)
return {1, ix_next, ix_seq, n_docs, total_dead, total_postings}
