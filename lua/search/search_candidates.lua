#!lua flags=no-writes
-- search_candidates.lua: the stored vectors of a query's candidates (ranked by BM25 in the
-- client: compozy_memory/_search/scoring.py) and of their neighbours, for the client to fuse
-- with the query's dense score.
-- USES: args docs meta query
-- KEYS: msgs meta archive summaries ixseg ixdocs ixgone ixvec
-- ARGV: neighbour_vectors since_id kinds ids...
--   neighbour_vectors  1: the neighbours' vectors too; 0: theirs are '' (a fusion that
--               scales BM25's score has no use for them: a third of the bytes)
--   since_id    neighbours with a smaller id are left out; 0 = none
--   kinds       as for search_fetch.lua: candidates and neighbours of other kinds are left out
--   ids         the candidates, best first, at most MAX_SEARCH_CANDIDATES
-- REPLY: {unembedded model names docs...}
--   unembedded  ids the vector step has still to look at (an upper bound: pinned messages
--               are among them)
--   model       the model of the stored vectors ('' when there are none)
--   names       the speaker names kept beside the vectors, tab-separated
--   docs        (id, candidate, vector) triples: the candidates still indexed and of a kind
--               kept (candidate 1), in the order asked, then their neighbours that are
--               indexed, pass the filters and are not candidates themselves (candidate 0);
--               vector is '' where there is none yet
-- Cost: the candidates' records, and one HMGET of at most 3 x candidates vectors.
local neighbour_vectors = int_arg(a_neighbour_vectors, 'neighbour_vectors', 0, 1) == 1
local since_id = int_arg(a_since_id, 'since_id', 0, nil)
local kinds = query_kinds(a_kinds)
local n = #ARGV - ARGS_FROM + 1
if n > MAX_SEARCH_CANDIDATES then
  fail('INVALID', 'at most ' .. MAX_SEARCH_CANDIDATES .. ' ids, got ' .. n)
end
local given = {}
for i = ARGS_FROM, #ARGV do
  given[#given + 1] = int_arg(ARGV[i], 'an id', 1, nil)
end
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone', 'vectors'},
  {'ix_next', 'vx_next', 'vx_model', 'vx_names'})
local vx_next = math.max(tonumber(m.vx_next) or 1, 1)
local unembedded = math.max(0, (tonumber(m.ix_next) or 0) - vx_next)
local out = {unembedded, m.vx_model or '', m.vx_names or ''}
if (tonumber(m.fmt) or 1) < DATA_FORMAT then
  return out
end
local docs = doc_reader(k_ixdocs)
docs.prefetch(given)
local function wanted(id)
  local kind = id >= math.max(since_id, 1) and docs.get(id) or 0
  return kind ~= 0 and (kinds == nil or kinds[kind] ~= nil)
end
local ids, flags, seen = {}, {}, {}
for _, id in ipairs(given) do
  if not seen[id] and wanted(id) then
    seen[id] = true
    ids[#ids + 1] = id
    flags[#flags + 1] = 1
  end
end
local candidates = #ids
for i = 1, candidates do
  for _, near in ipairs({ids[i] - 1, ids[i] + 1}) do
    if not seen[near] and wanted(near) then
      seen[near] = true
      ids[#ids + 1] = near
      flags[#flags + 1] = 0
    end
  end
end
local vectors = {}
local count = neighbour_vectors and #ids or candidates
if count > 0 and (tonumber(m.vx_count) or 0) > 0 then
  vectors = redis.call('HMGET', k_ixvec, unpack(ids, 1, count))
end
for i, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = flags[i]
  out[#out + 1] = bounded(vectors[i], MAX_VECTOR_BYTES, 'a stored vector') or ''
end
return out
