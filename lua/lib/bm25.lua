-- lib/bm25.lua: BM25 over the archive's index, its cost bounded by the query.
-- USES: index

-- BM25 over the index: {{id, score}, ...} best first, at most limit. The cost follows the
-- query, not the history:
--   1. Candidates come from the rarest terms' postings, read while they fit QUERY_BUDGET in
--      all (the rarest term is always read, at most QUERY_POSTINGS of its newest postings).
--   2. The terms left (common ones: a speaker's name, a month) are not read; they are scored
--      exactly on the best candidates, from those documents' own terms in ixdocs.
-- A document's final score adds neighbour_weight times the better of its two neighbours'
-- scores: in a conversation the answer often sits in the turn after the one with the
-- question's words. since_id (0: none) and roles (a set, or nil) filter documents.
local function bm25_search(k, terms, limit, k1, b, neighbour_weight, since_id, roles)
  local stats = redis.call('HMGET', k.meta, 'ix_docs', 'ix_len')
  local n_docs, total = tonumber(stats[1]) or 0, tonumber(stats[2]) or 0
  if n_docs <= 0 or limit <= 0 then
    return {}
  end
  local avg = total / n_docs
  -- BM25's length normalisation k1 * (1 - b + b * length / avg), as fixed + per_length * length.
  local fixed, per_length = k1 * (1 - b), k1 * b / avg
  local order = {}
  for _, term in ipairs(terms) do
    local df = tonumber(redis.call('HGET', k.ixdocs, 'f:' .. term))
    if df then
      order[#order + 1] = {term, df, math.log(1 + (n_docs - df + 0.5) / (df + 0.5)) * (k1 + 1)}
    end
  end
  table.sort(order, function(x, y) return x[2] < y[2] end)
  -- 1. Postings of the rarest terms. The role is read only when a filter asks for it.
  local pattern = roles and '^(%d+)\t(%d+)\t(%d+)\t(%a+)' or '^(%d+)\t(%d+)\t(%d+)'
  local scores, found, left, later = {}, 0, QUERY_BUDGET, {}
  -- Adds a term's newest postings to the scores. With new_only, documents already scored are
  -- left to step 2, and the ones it adds are marked in the set it returns.
  local function read(term, weight, new_only, most)
    local start, added = #term + 2, {}
    local postings = redis.call('ZREVRANGEBYLEX', k.ixpost, '(' .. term .. '\t~',
      '[' .. term .. '\t', 'LIMIT', 0, math.min(most, left))
    left = left - #postings
    for i = 1, #postings do
      local id, tf, length, role = string.match(postings[i], pattern, start)
      id = tonumber(id)
      if id >= since_id and (roles == nil or roles[role]) then
        local old = scores[id]
        if old == nil or not new_only then
          tf = tonumber(tf)
          scores[id] = (old or 0) + weight * tf / (tf + fixed + per_length * length)
          if old == nil then
            found = found + 1
            added[id] = true
          end
        end
      end
    end
    return added
  end
  for n, entry in ipairs(order) do
    if n == 1 or entry[2] <= left then
      read(entry[1], entry[3], false, QUERY_POSTINGS)
    else
      entry.needle = '\t' .. entry[1] .. '\t'
      later[#later + 1] = entry
    end
  end
  -- Too few candidates to fill the hits well (the rare terms are rare indeed): the next
  -- term's newest postings bring more, its share counted here for those and in step 2 for
  -- the others.
  if #later > 0 and found < 4 * limit and left > 0 then
    later[1].counted = read(later[1][1], later[1][3], true, 4 * limit - found)
  end
  local function better(x, y)
    if x[2] ~= y[2] then
      return x[2] > y[2]
    end
    return x[1] > y[1]  -- ties go to the newer message: the latest value of a changed fact
  end
  -- The best candidates, in a heap whose root is the worst kept: most documents lose to it at
  -- once, before anything is allocated for them. Common terms left to score widen the pool.
  local keep = 4 * limit
  if #later > 0 then
    keep = math.max(keep, RESCORE_POOL)
  end
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
  local ranked = heap
  -- 2. The common terms, scored exactly on the candidates from their documents' own terms
  -- (one HMGET for many candidates: far cheaper than a call each).
  if #later > 0 then
    for first = 1, #ranked, 500 do
      local last = math.min(first + 499, #ranked)
      local fields = {}
      for i = first, last do
        fields[#fields + 1] = 'd:' .. ranked[i][1]
      end
      local docs = redis.call('HMGET', k.ixdocs, unpack(fields))
      for i = first, last do
        local entry, doc = ranked[i], docs[i - first + 1]
        if doc then
          local norm = fixed + per_length * tonumber(string.match(doc, '^%d+\t%a+\t(%d+)'))
          for _, term in ipairs(later) do
            if not (term.counted and term.counted[entry[1]]) then
              local tf = term_frequency(doc, term[1], term.needle)
              if tf then
                entry[2] = entry[2] + term[3] * tf / (tf + norm)
              end
            end
          end
          scores[entry[1]] = entry[2]
        end
      end
    end
  end
  table.sort(ranked, better)
  if neighbour_weight > 0 then
    -- Only the best raw scores can gain from a neighbour enough to matter.
    local pool, seen = {}, {}
    for i = 1, math.min(#ranked, 4 * limit) do
      local id = ranked[i][1]
      for _, near in ipairs({id - 1, id, id + 1}) do
        -- A neighbour with no matching term of its own joins when it is indexed (and no
        -- role filter asks for more than the index can tell without reading it).
        if not seen[near] and (scores[near] or (roles == nil and near >= since_id
            and redis.call('HEXISTS', k.ixdocs, 'd:' .. near) == 1)) then
          seen[near] = true
          local boost = math.max(scores[near - 1] or 0, scores[near + 1] or 0)
          pool[#pool + 1] = {near, (scores[near] or 0) + neighbour_weight * boost}
        end
      end
    end
    table.sort(pool, better)
    ranked = pool
  end
  local out = {}
  for i = 1, math.min(#ranked, limit) do
    out[i] = ranked[i]
  end
  return out
end
