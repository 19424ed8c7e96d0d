#!lua flags=no-writes
-- search.lua: the archived messages that best match a query (BM25), with their neighbours.
-- USES: archive args bm25
-- KEYS: meta archive ixpost ixdocs
-- ARGV: limit k1 b neighbour_weight since_id roles terms...
--   limit             at most this many hits, 1..1000
--   k1, b             BM25's term-frequency saturation and length normalisation
--   neighbour_weight  how much the better neighbour's score lifts a message; 0 = none
--   since_id          only messages with this id or newer; 0 = all
--   roles             comma-separated roles to keep; '' = all
--   terms             the query's terms, analysed by the client as the index's were
-- Returns: {n, id, score, envelope, before, after, ...}: n hits, best first; the score as
--          text; before and after are the archived messages next to the hit (id - 1 and
--          id + 1), or '' where there is none. Cost follows the query's terms: each reads at
--          most QUERY_POSTINGS postings.
local limit = int_arg(a_limit, 'limit', 1, 1000)
local k1, b, weight = tonumber(a_k1), tonumber(a_b), tonumber(a_neighbour_weight)
if k1 == nil or b == nil or weight == nil or k1 < 0 or b < 0 or b > 1 or weight < 0 then
  fail('INVALID', 'k1 >= 0, 0 <= b <= 1 and neighbour_weight >= 0 are numbers')
end
local since_id = int_arg(a_since_id, 'since_id', 0, nil)
local roles = nil
if a_roles ~= '' then
  roles = {}
  for role in string.gmatch(a_roles, '[^,]+') do
    roles[role] = true
  end
end
local terms = {unpack(ARGV, ARGS_FROM)}
local hits = bm25_search(K, terms, limit, k1, b, weight, since_id, roles)
local out = {#hits}
for _, hit in ipairs(hits) do
  local id = hit[1]
  out[#out + 1] = id
  out[#out + 1] = string.format('%.6f', hit[2])
  out[#out + 1] = archived_by_id(K, id) or ''
  out[#out + 1] = archived_by_id(K, id - 1) or ''
  out[#out + 1] = archived_by_id(K, id + 1) or ''
end
return out
