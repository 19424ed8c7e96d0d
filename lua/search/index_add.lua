#!lua
-- index_add.lua: one bounded step of the indexer: store the segment a client built of what
-- index_pending.lua returned, and the negative segment of the removed documents it returned.
-- USES: archive args deltas docs docs_write envelope meta segments segments_write
-- KEYS: msgs meta archive summaries ixseg ixdocs ixgone ixvec
-- ARGV: ttl_ms archive_max analyzer incarnation ix_next upto seq_from seq_upto n_gone gone_first n_docs docs positive negative n_fields items...
--   ttl_ms       the memory's TTL: the keys this step writes get meta's deadline
--                (lib/deltas.lua: ttl_follow); 0 leaves TTLs alone
--   archive_max  the archive's cap, enforced a step at a time here too (it may have shrunk)
--   analyzer     the analyser version the segments were made with; must be the index's
--   incarnation  meta's incarnation as index_pending.lua returned it: a memory that expired
--                and was written again (its ids and ix_next start again) is not this one
--   ix_next      meta's ix_next as index_pending.lua returned it (the step applies only if
--                no other indexer moved it meanwhile)
--   upto         ix_next moves past this id
--   seq_from     meta's ix_seq as returned (0: no rebuild); seq_upto: it moves past this seq
--   n_gone       removed documents the negative segment takes out (ixgone's head as
--                returned); gone_first: the id of the first, 0 when n_gone is 0
--   n_docs       documents indexed, at most 2 x INDEX_STEP_DOCS (the live tail and, while
--                rebuilding, the archive)
--   docs         their records, DOC_ARG bytes each, big-endian: id (7 bytes), kind (1: 1..7,
--                lib/docs.lua), length in terms (2), seq (6: the place in the archive, 0 when
--                live); read from their bytes, not parsed from text
--   positive, negative  each segment's 'sign,docs,first,last,buckets,blocks', or '' for none
--   n_fields     (name, value) pairs after the documents: 'pb<k>', 'pp<j>' (the positive
--                segment's buckets and blocks), 'nb<k>', 'np<j>' (the negative one's), at
--                most STEP_FIELDS, MAX_CALL_BYTES in all
--   items        the n_fields pairs
-- REPLY: {applied ix_next ix_seq indexed list reservations garbage}
--   applied   1; 0 when another indexer got there first (nothing written: read again)
--   list, reservations, garbage  ixseg's L and R after the step, and 1 when merged segments'
--             fields wait to be deleted: what the indexer plans its merges from, without
--             another read
-- Nothing here decodes a posting: the server's work is the bytes it stores and one record per
-- document. Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE, COMPOZY_CONFLICT (the
-- analyser differs: rebuild the index; or MAX_SEGMENTS listed: merge first), COMPOZY_FORMAT,
-- COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local expected_next = int_arg(a_ix_next, 'ix_next', 0, nil)
local upto = int_arg(a_upto, 'upto', 0, nil)
local seq_from = int_arg(a_seq_from, 'seq_from', 0, nil)
local seq_upto = int_arg(a_seq_upto, 'seq_upto', 0, nil)
local n_gone = int_arg(a_n_gone, 'n_gone', 0, INDEX_STEP_DOCS)
local gone_first = int_arg(a_gone_first, 'gone_first', 0, nil)
local n_docs = int_arg(a_n_docs, 'n_docs', 0, 2 * INDEX_STEP_DOCS)
local n_fields = int_arg(a_n_fields, 'n_fields', 0, STEP_FIELDS)
if #ARGV ~= ARGS_FROM - 1 + 2 * n_fields or #a_docs ~= DOC_ARG * n_docs then
  fail('INVALID', 'expected ' .. n_docs .. ' documents of ' .. DOC_ARG .. ' bytes and '
    .. n_fields .. ' field pairs')
end
local shapes = {}
if a_positive ~= '' then
  shapes.p = seg_shape(a_positive, 'the positive segment')
end
if a_negative ~= '' then
  shapes.n = seg_shape(a_negative, 'the negative segment')
  if shapes.n.sign ~= -1 or shapes.n.docs > n_gone then
    fail('INVALID', 'the negative segment removes at most the ' .. n_gone .. ' documents given')
  end
end
if shapes.p and (shapes.p.sign ~= 1 or n_docs == 0) then
  fail('INVALID', 'the positive segment has sign 1 and indexes the documents given')
end
local fields = seg_fields(ARGV, ARGS_FROM, n_fields, shapes)
local documents, lowest, highest = {}, nil, nil
for i = 1, n_docs do
  local at = (i - 1) * DOC_ARG + 1
  local i1, i2, i3, i4, i5, i6, i7, kind, l1, l2, s1, s2, s3, s4, s5, s6 =
    string.byte(a_docs, at, at + DOC_ARG - 1)
  local id = (((((i1 * 256 + i2) * 256 + i3) * 256 + i4) * 256 + i5) * 256 + i6) * 256 + i7
  local length = l1 * 256 + l2
  local seq = ((((s1 * 256 + s2) * 256 + s3) * 256 + s4) * 256 + s5) * 256 + s6
  if id < 1 or id > 2 ^ 52 or kind < 1 or kind > 7 then
    fail('INVALID', 'document ' .. i .. ' is not id (1..2^52), kind (1..7), length, seq')
  end
  -- A live document lies in the range the step covers; an archived one in the rebuild's.
  if (seq == 0 and (id < expected_next or id > upto))
      or (seq > 0 and (seq < seq_from or seq > seq_upto)) then
    fail('INVALID', 'document ' .. id .. ' is not one the step covers')
  end
  documents[i] = {id, kind, length, seq}
  if lowest == nil or id < lowest then
    lowest = id
  end
  if highest == nil or id > highest then
    highest = id
  end
end
if shapes.p and (shapes.p.docs > n_docs or shapes.p.first < lowest or shapes.p.last > highest) then
  fail('INVALID', 'the positive segment holds documents the step does not index')
end

-- The parts this step reads or writes (the live messages and summaries it does not).
local m = guarded(K, {'archive', 'index', 'ixgone'},
  {'ix_next', 'ix_seq', 'ix_an', 'ix_len', 'ix_gen', 'ix_nseg', 'last_id'})
if (tonumber(m.fmt) or 1) < DATA_FORMAT or m.ix_off then
  return {0, 0, 0, 0, '', '', 0}
end
if (m.ix_an or a_analyzer) ~= a_analyzer then
  fail('CONFLICT', 'the index was built with analyser ' .. m.ix_an .. ', these terms with '
    .. a_analyzer .. ': rebuild the index')
end
local ix_next = tonumber(m.ix_next) or 0
local ix_seq = tonumber(m.ix_seq) or 0
local n_seg = tonumber(m.ix_nseg) or 0
-- A rebuild resumes where the archive starts now, as index_pending.lua said: past what the
-- cap dropped since (a step read before the cap moved holds envelopes it dropped, unindexed).
local resume = ix_seq
if ix_seq > 0 then
  resume = math.max(ix_seq, (tonumber(m.archive_base) or 0) + 1)
end
local stale = ix_next ~= expected_next or resume ~= seq_from or (m.inc or '') ~= a_incarnation
if n_gone > 0 then
  local head = bounded(redis.call('LINDEX', k_ixgone, 0), MAX_ENVELOPE_BYTES, 'a dropped message')
  stale = stale or not head or envelope_head(head) ~= gone_first
    or redis.call('LLEN', k_ixgone) < n_gone
end
-- The list, the merges and the garbage as stored: this step appends to the list and passes
-- the rest on, reading none of their entries (the indexer parses and checks what it gets).
local listed, reservations, garbage = seg_texts(k_ixseg, 'L', 'R', 'G')
local n_listed = seg_count(listed)
local function reply(applied, indexed_now)
  return {applied, ix_next, ix_seq, indexed_now, listed, reservations, garbage ~= '' and 1 or 0}
end
if stale then
  return reply(0, 0)
end
if n_listed ~= n_seg then
  fail('EVICTED', 'the index lists ' .. n_listed .. ' segments where meta says ' .. n_seg
    .. ': keys of this memory were evicted or deleted')
end
local adding = (shapes.p and 1 or 0) + (shapes.n and 1 or 0)
if n_seg + adding > MAX_SEGMENTS then
  fail('CONFLICT', 'the index lists ' .. n_seg .. ' segments, the most it keeps is '
    .. MAX_SEGMENTS .. ': merge first')
end

-- Records of documents not indexed yet (one indexed already is left: a step sent twice).
local docs = doc_reader(k_ixdocs)
local ids = {}
for i, d in ipairs(documents) do
  ids[i] = d[1]
end
docs.prefetch(ids)
local changes, indexed, length = {}, 0, 0
for _, d in ipairs(documents) do
  if docs.get(d[1]) == 0 and not changes[d[1]] then
    changes[d[1]] = {d[2], d[3], d[4]}
    indexed = indexed + 1
    length = length + d[3]
  end
end
if indexed < #documents and shapes.p then
  -- Some were indexed by a step this one repeats: its segment would count them twice.
  return reply(0, 0)
end
docs_write(k_ixdocs, changes, docs)

local gen = tonumber(m.ix_gen) or 0
local gens, sizes = {}, {p = 0, n = 0}
for _, tag in ipairs({'p', 'n'}) do
  if shapes[tag] then
    gen = gen + 1
    gens[tag] = gen
  end
end
for _, f in ipairs(fields) do
  sizes[f[1]] = sizes[f[1]] + #f[3]
end
seg_write(k_ixseg, fields, gens)
for _, tag in ipairs({'p', 'n'}) do
  if shapes[tag] then
    local entry = table.concat(seg_entry(gens[tag], shapes[tag], sizes[tag]), ',')
    listed = listed == '' and entry or listed .. ';' .. entry
    n_listed = n_listed + 1
  end
end
if adding > 0 then
  redis.call('HSET', k_ixseg, 'L', listed)
end
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
redis.call('HSET', k_meta, 'ix_next', ix_next, 'ix_seq', ix_seq, 'ix_an', a_analyzer,
  'ix_docs', (tonumber(m.ix_docs) or 0) + indexed, 'ix_len', (tonumber(m.ix_len) or 0) + length,
  'ix_gone', (tonumber(m.ix_gone) or 0) - n_gone, 'ix_gen', gen, 'ix_nseg', n_listed)
archive_cap(K, archive_max)
ttl_follow(k_meta, {k_ixseg, k_ixdocs, k_ixgone}, ttl_ms)
return reply(1, indexed)
