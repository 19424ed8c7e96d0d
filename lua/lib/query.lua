-- lib/query.lua: what search.lua and context.lua share: the query's arguments checked, the
-- index's state, and how much of the memory is not searchable yet.
-- USES: args
--
-- A query is at most MAX_QUERY_TERMS terms of at most MAX_TERM_BYTES bytes each, analysed by
-- the client as the index's were; kinds is '' (every kind) or comma-separated kind codes
-- (lib/docs.lua).

local function query_terms(args, from)
  local n = #args - from + 1
  if n > MAX_QUERY_TERMS then
    fail('INVALID', 'a query has at most ' .. MAX_QUERY_TERMS .. ' terms, got ' .. n)
  end
  local terms = {}
  for i = from, #args do
    if #args[i] == 0 or #args[i] > MAX_TERM_BYTES then
      fail('INVALID', 'a query term has 1 to ' .. MAX_TERM_BYTES .. ' bytes')
    end
    terms[#terms + 1] = args[i]
  end
  return terms
end

local function query_kinds(text)
  if text == '' then
    return nil
  end
  local kinds = {}
  for code in string.gmatch(text, '[^,]+') do
    kinds[int_arg(code, 'a kind', 1, 7)] = true
  end
  return kinds
end

-- BM25's parameters, checked.
local function query_options(limit, k1, b, weight, since_id, kinds, m)
  k1, b, weight = tonumber(k1), tonumber(b), tonumber(weight)
  if k1 == nil or b == nil or weight == nil or k1 < 0 or b < 0 or b > 1 or weight < 0 then
    fail('INVALID', 'k1 >= 0, 0 <= b <= 1 and neighbour_weight >= 0 are numbers')
  end
  local n_docs = tonumber(m.ix_docs) or 0
  return {limit = limit, k1 = k1, b = b, neighbour_weight = weight, since_id = since_id,
    kinds = kinds, n_docs = n_docs, total_length = math.max(tonumber(m.ix_len) or 0, 1),
    maxdead = tonumber(m.ix_maxdead) or 0}
end

-- Messages and archived envelopes not searchable yet: the live tail past the index, and the
-- archive a rebuild has still to reach. An index of an older format searches nothing.
local function unindexed(m)
  local count = tonumber(m.count) or 0
  local archived = (tonumber(m.archived) or 0) - (tonumber(m.archive_base) or 0)
  if (tonumber(m.fmt) or 1) < DATA_FORMAT then
    return count + archived
  end
  local live = math.max(0, (tonumber(m.last_id) or 0) - (tonumber(m.ix_next) or 0) + 1)
  local seq = tonumber(m.ix_seq) or 0
  local rebuilding = 0
  if seq > 0 then
    rebuilding = math.max(0, (tonumber(m.archived) or 0) - seq + 1)
  end
  return math.min(live, count + (tonumber(m.summary_count) or 0)) + rebuilding
end

-- The fields of meta a query reads (with lib/meta.lua's guarded()).
local QUERY_FIELDS = {'ix_next', 'ix_seq', 'ix_len', 'ix_maxdead', 'last_id'}
