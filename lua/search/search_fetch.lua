#!lua flags=no-writes
-- search_fetch.lua: the hits of a search the client ranked (compozy_memory/_search/scoring.py,
-- fused with dense scores where an embedder is set): messages by id wherever they are (live,
-- a summary, archived), with the turns next to them.
-- USES: args docs meta query
-- KEYS: msgs meta archive summaries ixdocs ixgone
-- ARGV: limit kinds tail_from inc ids...
--   limit  at most this many hits, 1..MAX_SEARCH_LIMIT
--   kinds  comma-separated kinds to keep (lib/docs.lua: 1 user, 2 assistant, 3 system,
--          4 tool, 5 developer, 6 summary, 7 other); '' = all
--   tail_from  the first id past the index as the client's read saw it (its ix_next, at least
--          1), when it ranked the live tail past it (index_read.lua); 0 when it did not: ids
--          without a record are hits only from there on and from meta's ix_next on (an index
--          dropped since resets ix_next, and then no record-less id below is one)
--   inc    the memory's incarnation as the client's read saw it ('' for any): when the memory
--          expired and was written again since, the ids are of the conversation that expired
--          (gone with it), so none is a hit
--   ids    the ranked candidates, best first, at most MAX_SEARCH_CANDIDATES
-- REPLY: {hits[5]}
--   hits  (id, where, envelope, before, after): the first limit candidates still indexed and
--         of a kind kept, or live past the index (the tail the client ranked itself and
--         filtered by kind: index_read.lua), in the order asked; where is 'live', 'summary' or
--         'archive'; before and after are the messages with the ids next to the hit's, or ''
--         where there is none
-- A candidate's record is read first (a few bytes): only the hits returned are located.
local limit = int_arg(a_limit, 'limit', 1, MAX_SEARCH_LIMIT)
local kinds = query_kinds(a_kinds)
local tail_from = a_tail_from == '0' and 0 or int_arg(a_tail_from, 'tail_from', 0, nil)
local n = #ARGV - ARGS_FROM + 1
if n > MAX_SEARCH_CANDIDATES then
  fail('INVALID', 'at most ' .. MAX_SEARCH_CANDIDATES .. ' ids, got ' .. n)
end
local ids = {}
for i = ARGS_FROM, #ARGV do
  ids[#ids + 1] = int_arg(ARGV[i], 'an id', 1, nil)
end
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'}, {'ix_next'})
local out = {0}
if (tonumber(m.fmt) or 1) < DATA_FORMAT or (a_inc ~= '' and (m.inc or '') ~= a_inc) then
  return out
end
local docs = doc_reader(k_ixdocs)
docs.prefetch(ids)
local ix_next = tail_from > 0 and math.max(tonumber(m.ix_next) or 1, tail_from) or nil
local state = {count = tonumber(m.count) or 0, archive_base = tonumber(m.archive_base) or 0,
  ix_next = ix_next}
-- Hits come in pairs (a turn and its reply, each the other's neighbour): each id is looked
-- up once.
local seen = {}
local function at(id)
  if seen[id] == nil then
    local env, where = locate(K, docs, id, state)
    seen[id] = env and {env, where} or false
  end
  return seen[id]
end
for _, id in ipairs(ids) do
  if out[1] >= limit then
    break
  end
  local kind = docs.get(id)
  local wanted
  if kind ~= 0 then
    wanted = kinds == nil or kinds[kind]
  else
    wanted = ix_next ~= nil and id >= ix_next
  end
  local hit = wanted and at(id)
  if hit then
    local before, after = at(id - 1), at(id + 1)
    out[#out + 1] = id
    out[#out + 1] = hit[2]
    out[#out + 1] = hit[1]
    out[#out + 1] = before and before[1] or ''
    out[#out + 1] = after and after[1] or ''
    out[1] = out[1] + 1
  end
end
return out
