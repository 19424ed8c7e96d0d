-- lib/bm25.lua: BM25 over the index, its cost bounded by the query, not the history.
-- USES: docs postings
--
-- bm25_search(k, terms, options) -> {{id, score}, ...} best first, at most options.limit:
--   1. Candidates come from the rarest terms' postings, newest first, read while they fit
--      QUERY_BUDGET in all (the rarest term is always read, at most QUERY_POSTINGS of it).
--   2. The terms left (common ones: a speaker's name, a month) are not read whole; the
--      RESCORE_TERMS rarest of them are scored on the best candidates from the blocks
--      holding those documents, at most RESCORE_BLOCKS blocks a query.
-- A document's final score adds neighbour_weight times the better of its two neighbours'
-- scores: in a conversation the answer often sits in the turn after the one with the
-- question's words. since_id (0: none) and kinds (a set of document kinds, or nil) filter
-- documents. options: limit k1 b neighbour_weight since_id kinds n_docs total_length maxdead,
-- and pool: how many of the ranked documents to return (default: limit). A search for limit
-- ranks 4 x limit of them (RESCORE_POOL when common terms are rescored) at no extra cost.

local function better(x, y)
  if x[2] ~= y[2] then
    return x[2] > y[2]
  end
  return x[1] > y[1]  -- ties go to the newer message: the latest value of a changed fact
end

-- The keep best of scores (id -> score), in a heap whose root is the worst kept: most
-- documents lose to it at once, before anything is allocated for them.
local function best_of(scores, keep)
  local heap, n = {}, 0
  local function sift_down(at)
    while true do
      local low, l, r = at, 2 * at, 2 * at + 1
      if l <= n and better(heap[low], heap[l]) then low = l end
      if r <= n and better(heap[low], heap[r]) then low = r end
      if low == at then return end
      heap[at], heap[low] = heap[low], heap[at]
      at = low
    end
  end
  for id, score in pairs(scores) do
    if n < keep then
      n = n + 1
      heap[n] = {id, score}
      local at = n
      while at > 1 and better(heap[math.floor(at / 2)], heap[at]) do
        local up = math.floor(at / 2)
        heap[at], heap[up] = heap[up], heap[at]
        at = up
      end
    else
      local root = heap[1]
      if score > root[2] or (score == root[2] and id > root[1]) then
        heap[1] = {id, score}
        sift_down(1)
      end
    end
  end
  return heap
end

local function bm25_search(k, terms, o)
  if o.n_docs <= 0 or o.limit <= 0 or #terms == 0 then
    return {}
  end
  local k1, limit = o.k1, o.limit
  local fixed, per_length = k1 * (1 - o.b), k1 * o.b / (o.total_length / o.n_docs)
  local docs = doc_reader(k.ixdocs)
  -- A document counts when it passes the filters and is alive: a posting of a removed
  -- document stays until compaction, and only ids up to maxdead can be removed.
  local function wanted(id)
    if id < o.since_id then
      return false
    end
    if o.kinds == nil and id > o.maxdead then
      return true
    end
    local kind = docs.get(id)
    return kind ~= 0 and (o.kinds == nil or o.kinds[kind] ~= nil)
  end
  local stored = redis.call('HMGET', k.ixpost, unpack(terms))
  local order = {}
  for i, term in ipairs(terms) do
    if stored[i] then
      local h = header_read(stored[i])
      if h.df > 0 then
        local weight = math.log(1 + (o.n_docs - h.df + 0.5) / (h.df + 0.5)) * (k1 + 1)
        order[#order + 1] = {term, h.df, weight, h}
      end
    end
  end
  table.sort(order, function(x, y) return x[2] < y[2] end)
  -- 1. Postings of the rarest terms.
  local scores, lengths, found, left, later = {}, {}, 0, QUERY_BUDGET, {}
  local function read(entry, new_only, most)
    local added = {}
    local weight = entry[3]
    left = left - postings_newest(k.ixpost, entry[1], entry[4], math.min(most, left),
      function(id, tf, length)
        local old = scores[id]
        if (old == nil and not wanted(id)) or (old ~= nil and new_only) then
          return
        end
        scores[id] = (old or 0) + weight * tf / (tf + fixed + per_length * length)
        lengths[id] = length
        if old == nil then
          found = found + 1
          added[id] = true
        end
      end)
    return added
  end
  for n, entry in ipairs(order) do
    if n == 1 or entry[2] <= left then
      read(entry, false, QUERY_POSTINGS)
    else
      later[#later + 1] = entry
    end
  end
  -- Too few candidates to fill the hits well: the next term's newest postings bring more,
  -- its share counted here for those and in step 2 for the others.
  if #later > 0 and found < 4 * limit and left > 0 then
    later[1].counted = read(later[1], true, 4 * limit - found)
  end
  local keep = 4 * limit
  if #later > 0 then
    keep = math.max(keep, RESCORE_POOL)
  end
  local ranked = best_of(scores, keep)
  -- 2. The common terms, scored on the candidates from the blocks that hold them: the
  -- RESCORE_TERMS rarest of them (the others weigh least, and each costs its directory).
  if #later > 0 then
    local blocks = RESCORE_BLOCKS
    for n, entry in ipairs(later) do
      if n > RESCORE_TERMS then
        break
      end
      local want = {}
      for _, candidate in ipairs(ranked) do
        if not (entry.counted and entry.counted[candidate[1]]) then
          want[candidate[1]] = true
        end
      end
      local tfs, used = postings_lookup(k.ixpost, entry[1], entry[4], want, blocks)
      blocks = blocks - used
      for _, candidate in ipairs(ranked) do
        local tf = tfs[candidate[1]]
        if tf then
          local norm = fixed + per_length * lengths[candidate[1]]
          candidate[2] = candidate[2] + entry[3] * tf / (tf + norm)
          scores[candidate[1]] = candidate[2]
        end
      end
    end
  end
  table.sort(ranked, better)
  if o.neighbour_weight > 0 then
    -- Only the best raw scores can gain from a neighbour enough to matter. A neighbour with
    -- no matching term of its own joins when it is indexed and passes the filters.
    local pool, seen = {}, {}
    for i = 1, math.min(#ranked, 4 * limit) do
      local id = ranked[i][1]
      for _, near in ipairs({id - 1, id, id + 1}) do
        if not seen[near] and (scores[near] or (near >= 1 and wanted(near)
            and docs.get(near) ~= 0)) then
          seen[near] = true
          local boost = math.max(scores[near - 1] or 0, scores[near + 1] or 0)
          pool[#pool + 1] = {near, (scores[near] or 0) + o.neighbour_weight * boost}
        end
      end
    end
    table.sort(pool, better)
    ranked = pool
  end
  local out = {}
  for i = 1, math.min(#ranked, o.pool or limit) do
    out[i] = ranked[i]
  end
  return out
end
