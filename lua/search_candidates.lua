#!lua flags=no-writes
-- search_candidates.lua: a query's best BM25 documents, their neighbours, and the stored
-- vectors of both, for the client to fuse with the query's dense score.
-- USES: args bm25 docs meta query
-- KEYS: msgs meta archive summaries ixpost ixdocs ixgone ixvec
-- ARGV: candidates neighbour_vectors k1 b since_id kinds terms...
--   candidates  the best this many documents by BM25, 1..MAX_SEARCH_CANDIDATES
--   neighbour_vectors  1: the neighbours' vectors too; 0: theirs are '' (a fusion that
--               scales BM25's score has no use for them: a third of the bytes)
--   k1, b, since_id, kinds, terms   as for search.lua
-- REPLY: {unindexed unembedded model names docs...}
--   unindexed   messages not searchable yet (as for search.lua)
--   unembedded  ids the vector step has still to look at (an upper bound: pinned messages
--               are among them)
--   model       the model of the stored vectors ('' when there are none)
--   names       the speaker names kept beside the vectors, tab-separated
--   docs        (id, score, vector) triples: the candidates best first with their BM25 score (no
--               neighbour boost) as text, then their neighbours that pass the filters and
--               are not candidates themselves, score ''; vector is '' where there is none yet
-- Cost: a BM25 search (lib/bm25.lua) and one HMGET of at most 3 x candidates vectors.
local candidates = int_arg(a_candidates, 'candidates', 1, MAX_SEARCH_CANDIDATES)
local neighbour_vectors = int_arg(a_neighbour_vectors, 'neighbour_vectors', 0, 1) == 1
local since_id = int_arg(a_since_id, 'since_id', 0, nil)
local kinds = query_kinds(a_kinds)
local terms = query_terms(ARGV, ARGS_FROM)
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone', 'vectors'},
  {'ix_next', 'ix_seq', 'ix_len', 'ix_maxdead', 'last_id', 'vx_next', 'vx_model', 'vx_names'})
-- The candidates come from the pool a search of a quarter as many hits ranks anyway
-- (lib/bm25.lua): four times the hits, and RESCORE_POOL when common terms are rescored.
local o = query_options(math.ceil(candidates / 4), a_k1, a_b, 0, since_id, kinds, m)
o.pool = candidates
local vx_next = math.max(tonumber(m.vx_next) or 1, 1)
local unembedded = math.max(0, (tonumber(m.ix_next) or 0) - vx_next)
local out = {unindexed(m), unembedded, m.vx_model or '', m.vx_names or ''}
if (tonumber(m.fmt) or 1) < DATA_FORMAT then
  return out
end
local hits = bm25_search(K, terms, o)
local docs = doc_reader(k_ixdocs)
local ids, scores, seen = {}, {}, {}
for _, hit in ipairs(hits) do
  ids[#ids + 1] = hit[1]
  scores[#scores + 1] = string.format('%.6f', hit[2])
  seen[hit[1]] = true
end
for i = 1, #hits do
  for _, near in ipairs({hits[i][1] - 1, hits[i][1] + 1}) do
    if near >= math.max(since_id, 1) and not seen[near] then
      seen[near] = true
      local kind = docs.get(near)
      if kind ~= 0 and (kinds == nil or kinds[kind]) then
        ids[#ids + 1] = near
        scores[#scores + 1] = ''
      end
    end
  end
end
local vectors = {}
local wanted = neighbour_vectors and #ids or #hits
if wanted > 0 and (tonumber(m.vx_count) or 0) > 0 then
  vectors = redis.call('HMGET', k_ixvec, unpack(ids, 1, wanted))
end
for i, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = scores[i]
  out[#out + 1] = vectors[i] or ''
end
return out
