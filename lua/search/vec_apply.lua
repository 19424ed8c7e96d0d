#!lua
-- vec_apply.lua: one bounded step of the vector step: store what vec_pending.lua returned,
-- embedded by the client.
-- USES: args deltas docs meta
-- KEYS: msgs meta archive summaries ixdocs ixgone ixvec
-- ARGV: ttl_ms model vx_next upto names n vectors...
--   ttl_ms   the memory's TTL: the keys written get its deadline (lib/deltas.lua:
--            ttl_follow); 0 leaves TTLs alone
--   model    the embedder's model; the stored vectors must be of the same (vec_reset.lua)
--   vx_next  meta's vx_next as vec_pending.lua returned it (the step applies only if no
--            other client moved it meanwhile); upto: vx_next moves past this id
--   names    speaker names to keep beside the vectors, tab-separated: merged with those kept,
--            at most MAX_SPEAKER_NAMES of at most MAX_TERM_BYTES bytes
--   n        vectors that follow, at most VECTOR_STEP_DOCS and VECTOR_STEP_BYTES of vectors in
--            all: (id, vector) pairs, each id in
--            vx_next..upto, each vector 1..MAX_VECTOR_BYTES bytes of 1..127 (ASCII: a client
--            that decodes replies reads them whole), all of one length
-- REPLY: {applied vx_next stored}
--   applied  1; 0 when another client got there first or the index was reset since the read
--            (nothing written: read again)
--   stored   the vectors the memory holds after the step
-- A vector of a message removed since the read (the archive's cap) is not stored.
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_CONFLICT (the stored vectors are of
-- another model, or another length), COMPOZY_FORMAT, COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local expected = int_arg(a_vx_next, 'vx_next', 0, nil)
local upto = int_arg(a_upto, 'upto', expected - 1, nil)
local n = int_arg(a_n, 'n', 0, VECTOR_STEP_DOCS)
if #a_model == 0 or #a_model > MAX_TERM_BYTES then
  fail('INVALID', 'a model name has 1 to ' .. MAX_TERM_BYTES .. ' bytes')
end
if #ARGV ~= ARGS_FROM - 1 + 2 * n then
  fail('INVALID', 'expected ' .. n .. ' (id, vector) pairs, got '
    .. (#ARGV - ARGS_FROM + 1) .. ' arguments')
end
local ids, width = {}, nil
for i = 1, n do
  local at = ARGS_FROM + 2 * (i - 1)
  ids[i] = int_arg(ARGV[at], 'a vector id', math.max(expected, 1), upto)
  local size = #ARGV[at + 1]
  if size < 1 or size > MAX_VECTOR_BYTES or (width and size ~= width)
      or string.find(ARGV[at + 1], '[^\1-\127]') then
    fail('INVALID', 'a vector has 1 to ' .. MAX_VECTOR_BYTES .. ' bytes in 1..127 (text), all '
      .. 'vectors of a call one length')
  end
  width = size
end
if width and n * width > VECTOR_STEP_BYTES then
  fail('INVALID', 'a step stores at most ' .. VECTOR_STEP_BYTES .. ' bytes of vectors')
end
local names = {}
for name in string.gmatch(a_names, '[^\t]+') do
  if #name > MAX_TERM_BYTES or #names >= MAX_SPEAKER_NAMES then
    fail('INVALID', 'at most ' .. MAX_SPEAKER_NAMES .. ' speaker names of at most '
      .. MAX_TERM_BYTES .. ' bytes')
  end
  names[#names + 1] = name
end
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone', 'vectors'},
  {'ix_next', 'ix_seq', 'vx_next', 'vx_model', 'vx_bytes', 'vx_names'})
if (tonumber(m.fmt) or 1) < DATA_FORMAT then
  return {0, 0, 0}
end
local stored = tonumber(m.vx_count) or 0
if m.vx_model and m.vx_model ~= a_model then
  fail('CONFLICT', 'the stored vectors are of model ' .. m.vx_model .. ', these of '
    .. a_model .. ': reset them first')
end
if width and m.vx_bytes and tonumber(m.vx_bytes) ~= width and stored > 0 then
  fail('CONFLICT', 'the stored vectors have ' .. m.vx_bytes .. ' bytes, these ' .. width)
end
local vx_next = math.max(tonumber(m.vx_next) or 1, 1)
if vx_next ~= math.max(expected, 1) or (tonumber(m.ix_seq) or 0) > 0
    or (tonumber(m.ix_next) or 0) <= upto then
  return {0, vx_next, stored}
end

local docs = doc_reader(k_ixdocs)
docs.prefetch(ids)
local writes = {}
for i, id in ipairs(ids) do
  if docs.get(id) ~= 0 then
    writes[#writes + 1] = id
    writes[#writes + 1] = ARGV[ARGS_FROM + 2 * i - 1]
  end
end
if #writes > 0 then
  stored = stored + redis.call('HSET', k_ixvec, unpack(writes))
end
-- The names kept: those already kept first, then the new ones, to the cap.
local kept, seen = {}, {}
for _, list in ipairs({m.vx_names or '', names}) do
  local items = list
  if type(list) == 'string' then
    items = {}
    for name in string.gmatch(list, '[^\t]+') do
      items[#items + 1] = name
    end
  end
  for _, name in ipairs(items) do
    if not seen[name] and #kept < MAX_SPEAKER_NAMES then
      seen[name] = true
      kept[#kept + 1] = name
    end
  end
end
redis.call('HSET', k_meta, 'vx_next', upto + 1, 'vx_model', a_model, 'vx_count', stored,
  'vx_bytes', width or m.vx_bytes or 0, 'vx_names', table.concat(kept, '\t'))
ttl_follow(k_meta, KEYS, ttl_ms)
return {1, upto + 1, stored}
