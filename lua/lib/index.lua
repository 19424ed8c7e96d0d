-- lib/index.lua: the inverted index over a memory's messages, kept off the write path.
-- USES: args docs docs_write packed postings postings_write
--
-- Writes never index: an append only gives its messages ids. The indexer (any client: the
-- handles run it in the background, the flusher before it commits) reads what is not indexed
-- yet (index_pending.lua), analyses the text (stemming, stop words: only the client can) and
-- sends the terms of at most INDEX_STEP_DOCS documents and INDEX_STEP_POSTINGS postings a call
-- (index_apply.lua). meta says how far it got:
--   ix_next   every live message and summary with a smaller id is indexed (pinned messages,
--             priority 0, never are: they always lead the context); messages move to the
--             archive only once indexed, so what is left is the live tail and new summaries
--   ix_seq    > 0 while an index is being rebuilt: archive envelopes from this seq on are
--             indexed by the same steps where their record is missing
--   ix_docs, ix_len  documents alive and their total length (BM25's N and average length)
--   ix_gone   envelopes the archive's cap dropped whose terms still count in df (ixgone)
--   ix_postings, ix_dead  postings stored, and those of removed documents (compaction
--             rewrites the blocks holding them once they are a quarter of all)
--   ix_maxdead  the largest id ever removed: a block whose ids are all larger holds none
-- A document argument is 'id<TAB>kind<TAB>length<TAB>seq<TAB>term<TAB>tf<TAB>term<TAB>tf...'
-- (seq: its place in the archive, 0 when live; kind and length are 0 for a removed one).

-- Parses document arguments into {id, kind, length, seq, terms = {term...}, tfs = {tf...}},
-- all checked: the caps on terms, their bytes, and on the postings of one call (counted in
-- budget, a table {postings = n}).
local function parse_documents(args, from, n, removed, budget)
  local out = {}
  for i = 1, n do
    local fields = split_tabs(args[from + i - 1])
    local id = int_or_nil(fields[1], 1, 2 ^ 52)
    local kind = int_or_nil(fields[2], removed and 0 or 1, removed and 0 or 7)
    local length = int_or_nil(fields[3], 0, 65535)
    local seq = int_or_nil(fields[4], 0, 2 ^ 52)
    if not id or not kind or not length or not seq or #fields % 2 ~= 0 then
      fail('INVALID', 'document ' .. i .. ' is not id, kind, length, seq, then term/tf pairs')
    end
    local n_terms = (#fields - 4) / 2
    if n_terms > MAX_DOC_TERMS then
      fail('INVALID', 'document ' .. id .. ' has ' .. n_terms .. ' terms; at most '
        .. MAX_DOC_TERMS .. ' are indexed')
    end
    budget.postings = budget.postings + n_terms
    if budget.postings > INDEX_STEP_POSTINGS then
      fail('INVALID', 'at most ' .. INDEX_STEP_POSTINGS .. ' postings go in one call')
    end
    local doc = {id = id, kind = kind, length = length, seq = seq, terms = {}, tfs = {}}
    for t = 5, #fields, 2 do
      local term = fields[t]
      if #term > MAX_TERM_BYTES or string.find(term, '%z') then
        fail('INVALID', 'a term has at most ' .. MAX_TERM_BYTES .. ' bytes and no NUL byte')
      end
      doc.terms[#doc.terms + 1] = term
      doc.tfs[#doc.tfs + 1] = int_or_nil(fields[t + 1], 1, 65535)
        or int_arg(fields[t + 1], 'a term frequency', 1, 65535)
    end
    out[i] = doc
  end
  return out
end

-- Indexes documents whose records are missing (one already indexed is skipped, so a step
-- sent twice changes nothing). Returns the documents, the length and the postings added.
local function index_documents(k, documents)
  local docs = doc_reader(k.ixdocs)
  local ids = {}
  for i, doc in ipairs(documents) do
    ids[i] = doc.id
  end
  docs.prefetch(ids)
  local adds, changes = {}, {}
  local n_docs, length, postings = 0, 0, 0
  for _, doc in ipairs(documents) do
    if docs.get(doc.id) == 0 and not changes[doc.id] then
      changes[doc.id] = {doc.kind, doc.length, doc.seq}
      n_docs = n_docs + 1
      length = length + doc.length
      for t, term in ipairs(doc.terms) do
        local add = adds[term]
        if not add then
          add = {{}, {}, {}}
          adds[term] = add
        end
        add[1][#add[1] + 1] = doc.id
        add[2][#add[2] + 1] = doc.tfs[t]
        add[3][#add[3] + 1] = doc.length
        postings = postings + 1
      end
    end
  end
  postings_add(k.ixpost, adds)
  docs_write(k.ixdocs, changes)
  return n_docs, length, postings
end

-- Takes removed documents' terms out of the document frequencies; returns the postings
-- that became dead.
local function unindex_documents(k, documents)
  local counts = {}
  local dead = 0
  for _, doc in ipairs(documents) do
    for _, term in ipairs(doc.terms) do
      counts[term] = (counts[term] or 0) + 1
      dead = dead + 1
    end
  end
  local terms = {}
  for term in pairs(counts) do
    terms[#terms + 1] = term
  end
  for from = 1, #terms, 1000 do
    local chunk = {unpack(terms, from, math.min(from + 999, #terms))}
    local stored = redis.call('HMGET', k.ixpost, unpack(chunk))
    local writes = {}
    for i, term in ipairs(chunk) do
      if stored[i] then
        local h = header_read(stored[i])
        h.df = math.max(0, h.df - counts[term])
        writes[#writes + 1] = term
        writes[#writes + 1] = header_text(h)
      end
    end
    if #writes > 0 then
      redis.call('HSET', k.ixpost, unpack(writes))
    end
  end
  return dead
end

-- Keeps only the postings of documents still alive (only an id up to maxdead can be a
-- removed one); returns the arrays and how many went.
local function alive_postings(docs, ids, tfs, lengths, maxdead)
  local keep_ids, keep_tfs, keep_lengths = {}, {}, {}
  for i = 1, #ids do
    if ids[i] > maxdead or docs.get(ids[i]) ~= 0 then
      keep_ids[#keep_ids + 1] = ids[i]
      keep_tfs[#keep_tfs + 1] = tfs[i]
      keep_lengths[#keep_lengths + 1] = lengths[i]
    end
  end
  return keep_ids, keep_tfs, keep_lengths, #ids - #keep_ids
end

-- One bounded step of compaction: the fields one HSCAN call returns, their dead postings
-- dropped. Returns the next cursor ('0': the sweep is done) and the postings removed.
local function compact_step(k, cursor, maxdead)
  local scan = redis.call('HSCAN', k.ixpost, cursor, 'COUNT', COMPACT_FIELDS)
  local fields = scan[2]
  local docs = doc_reader(k.ixdocs)
  local removed = 0
  local writes, deletes, touched = {}, {}, {}
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    local term, block = string.match(field, '^(.-)%z(%d+)$')
    if term then
      local b = text_bytes(value)
      local base, at = get_varint(b, 1)
      local n
      n, at = get_varint(b, at)
      if base < maxdead then
        local ids, tfs, lengths = decode_postings(b, at, n, base)
        local gone
        ids, tfs, lengths, gone = alive_postings(docs, ids, tfs, lengths, maxdead)
        if gone > 0 then
          removed = removed + gone
          if #ids == 0 then
            deletes[#deletes + 1] = field
            touched[term] = true
          else
            writes[#writes + 1] = field
            writes[#writes + 1] = block_text(ids, tfs, lengths, base)
          end
        end
      end
    elseif not string.find(field, '%z') then
      local h = header_read(value)
      if h.tailn > 0 and h.base < maxdead then
        local ids, tfs, lengths = tail_postings(h)
        local gone
        ids, tfs, lengths, gone = alive_postings(docs, ids, tfs, lengths, maxdead)
        if gone > 0 then
          removed = removed + gone
          local tail, previous = {}, h.base
          for x = 1, #ids do
            put_varint(tail, zigzag(ids[x] - previous))
            put_varint(tail, tfs[x])
            put_varint(tail, lengths[x])
            previous = ids[x]
          end
          h.tail, h.tailn = bytes_text(tail), #ids
          writes[#writes + 1] = field
          writes[#writes + 1] = header_text(h)
        end
      end
      if h.df == 0 then
        touched[field] = true
      end
    end
  end
  for from = 1, #writes, 1000 do
    redis.call('HSET', k.ixpost, unpack(writes, from, math.min(from + 999, #writes)))
  end
  for from = 1, #deletes, 1000 do
    redis.call('HDEL', k.ixpost, unpack(deletes, from, math.min(from + 999, #deletes)))
  end
  -- Terms whose oldest blocks went: the header's first moves up past missing blocks (a few
  -- a step), the directory with it; a term left with nothing goes whole.
  for term in pairs(touched) do
    local stored = redis.call('HMGET', k.ixpost, term, term .. '\0')
    if stored[1] then
      local h = header_read(stored[1])
      local directory = directory_read(stored[2])
      local moved = 0
      while h.first <= h.nb and moved < 16
          and redis.call('HEXISTS', k.ixpost, term .. '\0' .. h.first) == 0 do
        h.first = h.first + 1
        table.remove(directory, 1)
        moved = moved + 1
      end
      if h.df == 0 and h.tailn == 0 and h.first > h.nb then
        redis.call('HDEL', k.ixpost, term, term .. '\0')
      elseif moved > 0 then
        redis.call('HSET', k.ixpost, term, header_text(h), term .. '\0', directory_text(directory))
      end
    end
  end
  return scan[1], removed
end
