#!lua flags=no-writes
-- search_fetch.lua: messages by id wherever they are (live, a summary, archived), with the
-- turns next to them: the hits of a search the client ranked itself (fused scores).
-- USES: args docs meta
-- KEYS: msgs meta archive summaries ixdocs ixgone
-- ARGV: ids...
--   ids  message ids, best first, at most MAX_SEARCH_LIMIT
-- REPLY: {hits[5]}
--   hits  (id, where, envelope, before, after) in the order asked, as for search.lua; an id
--         no longer indexed (the archive's cap dropped it since) is left out
local n = #ARGV - ARGS_FROM + 1
if n > MAX_SEARCH_LIMIT then
  fail('INVALID', 'at most ' .. MAX_SEARCH_LIMIT .. ' ids, got ' .. n)
end
local ids = {}
for i = ARGS_FROM, #ARGV do
  ids[#ids + 1] = int_arg(ARGV[i], 'an id', 1, nil)
end
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'})
local out = {0}
if (tonumber(m.fmt) or 1) < DATA_FORMAT then
  return out
end
local docs = doc_reader(k_ixdocs)
local state = {count = tonumber(m.count) or 0, archive_base = tonumber(m.archive_base) or 0}
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
  local hit = at(id)
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
