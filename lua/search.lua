#!lua flags=no-writes
-- search.lua: the messages of a memory that best match a query (BM25), with their neighbours:
-- live ones, archived ones and summaries alike.
-- USES: args bm25 docs meta query
-- KEYS: msgs meta archive summaries ixpost ixdocs ixgone
-- ARGV: limit k1 b neighbour_weight since_id kinds terms...
--   limit             at most this many hits, 1..MAX_SEARCH_LIMIT
--   k1, b             BM25's term-frequency saturation and length normalisation
--   neighbour_weight  how much the better neighbour's score lifts a message; 0 = none
--   since_id          only messages with this id or newer; 0 = all
--   kinds             comma-separated kinds to keep (lib/docs.lua: 1 user, 2 assistant,
--                     3 system, 4 tool, 5 developer, 6 summary, 7 other); '' = all
--   terms             the query's terms, analysed by the client as the index's were
-- REPLY: {unindexed hits[6]}
--   unindexed  messages not searchable yet (the indexer has them still to do)
--   hits       (id, score, where, envelope, before, after) best first: the score as text;
--              where is 'live', 'summary' or 'archive'; before and after are the messages
--              with the ids next to the hit's, or '' where there is none
-- Cost follows the query's terms, not the history: see lib/bm25.lua.
local limit = int_arg(a_limit, 'limit', 1, MAX_SEARCH_LIMIT)
local since_id = int_arg(a_since_id, 'since_id', 0, nil)
local kinds = query_kinds(a_kinds)
local terms = query_terms(ARGV, ARGS_FROM)
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'}, QUERY_FIELDS)
local o = query_options(limit, a_k1, a_b, a_neighbour_weight, since_id, kinds, m)
local out = {unindexed(m), 0}
if (tonumber(m.fmt) or 1) < DATA_FORMAT then
  return out
end
local hits = bm25_search(K, terms, o)
local docs = doc_reader(k_ixdocs)
local state = {count = tonumber(m.count) or 0, archive_base = tonumber(m.archive_base) or 0}
for _, hit in ipairs(hits) do
  local id = hit[1]
  local env, where = locate(K, docs, id, state)
  if env then
    out[#out + 1] = id
    out[#out + 1] = string.format('%.6f', hit[2])
    out[#out + 1] = where
    out[#out + 1] = env
    out[#out + 1] = (locate(K, docs, id - 1, state)) or ''
    out[#out + 1] = (locate(K, docs, id + 1, state)) or ''
    out[2] = out[2] + 1
  end
end
return out
