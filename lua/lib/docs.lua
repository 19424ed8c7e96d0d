-- lib/docs.lua: the index's document records, and where a message is by its id.
-- USES: args envelope
--
-- ixdocs is a HASH of blocks: field floor(id / DOC_BLOCK) holds DOC_BLOCK records of
-- DOC_SIZE bytes, one per id of the block (the block's string stops after its last record):
--   byte 1      kind: 0 = not indexed or removed, else the role (KINDS below)
--   bytes 2-3   length in terms, big-endian (capped at 65535, as the postings hold it)
--   bytes 4-8   seq: the message's place in the archive (1 = the first envelope ever
--               archived), 0 while it is live or a live summary
-- A document is alive while its kind is not 0. The archive holds envelope seq at list index
-- seq - archive_base - 1 (meta's archive_base counts those its cap dropped).

local DOC_BLOCK = 128
local DOC_SIZE = 8
local KINDS = {user = 1, assistant = 2, system = 3, tool = 4, developer = 5, summary = 6,
  other = 7}

-- A record as kind, length, seq (kind 0 when there is none).
local function doc_decode(block, id)
  if not block then
    return 0, 0, 0
  end
  local at = (id % DOC_BLOCK) * DOC_SIZE + 1
  local kind, l1, l2, s1, s2, s3, s4, s5 = string.byte(block, at, at + DOC_SIZE - 1)
  if not kind then
    return 0, 0, 0
  end
  return kind, l1 * 256 + l2, (((s1 * 256 + s2) * 256 + s3) * 256 + s4) * 256 + s5
end

-- Refuses a block of records longer than a block holds (written raw: never read whole).
local function doc_sized(k_ixdocs, field)
  local size = redis.call('HSTRLEN', k_ixdocs, field)
  if size > DOC_BLOCK * DOC_SIZE or size % DOC_SIZE ~= 0 then
    fail('CORRUPT', 'a block of index records is longer than ' .. DOC_BLOCK * DOC_SIZE
      .. ' bytes, or not whole records: it was not written by compozy-memory')
  end
end

-- A reader of records that reads each block once per call: docs.get(id) -> kind, length, seq.
local function doc_reader(k_ixdocs)
  local blocks = {}
  local reader = {}
  -- Block b's records as stored (false: none), read (sized first) unless read already.
  function reader.block(b)
    local block = blocks[b]
    if block == nil then
      doc_sized(k_ixdocs, tostring(b))
      block = redis.call('HGET', k_ixdocs, tostring(b)) or false
      blocks[b] = block
    end
    return block
  end
  -- Block b as a write left it (false: deleted), for reads after the write.
  function reader.set(b, block)
    blocks[b] = block
  end
  function reader.get(id)
    local b = (id - id % DOC_BLOCK) / DOC_BLOCK
    return doc_decode(blocks[b] or reader.block(b) or nil, id)
  end
  -- Reads the blocks of many ids with one HMGET.
  function reader.prefetch(ids)
    local wanted, fields = {}, {}
    for _, id in ipairs(ids) do
      local b = (id - id % DOC_BLOCK) / DOC_BLOCK
      if blocks[b] == nil and not wanted[b] then
        wanted[b] = true
        fields[#fields + 1] = tostring(b)
      end
    end
    for _, field in ipairs(fields) do
      doc_sized(k_ixdocs, field)
    end
    for from = 1, #fields, 1000 do
      local chunk = {unpack(fields, from, math.min(from + 999, #fields))}
      local values = redis.call('HMGET', k_ixdocs, unpack(chunk))
      for i, field in ipairs(chunk) do
        blocks[tonumber(field)] = values[i] or false
      end
    end
  end
  return reader
end

-- The index in list msgs of live message id (ids increase along the list), or nil and where
-- it would be. The newest messages are contiguous ids (appends give consecutive ids; gaps are
-- left only by moves, which take the oldest), so the guess count - 1 - (newest - id) is
-- usually right at once; otherwise the place lies between the guess and the end (gaps only
-- push it later), and a binary search of LINDEX reads finds it. newest: the last live id,
-- nil to read it. Found, the envelope read there comes third (after nil), so the caller does
-- not read it again.
local function live_index(k_msgs, id, count, newest)
  if count == 0 then
    return nil, 0
  end
  if newest == nil then
    newest = envelope_head(redis.call('LINDEX', k_msgs, -1))
  end
  local low, high = math.max(0, count - 1 - (newest - id)), count - 1
  if low <= high then
    local env = redis.call('LINDEX', k_msgs, low)
    if env and envelope_head(env) == id then
      return low, nil, env
    end
  end
  while low <= high do
    local mid = math.floor((low + high) / 2)
    local env = redis.call('LINDEX', k_msgs, mid)
    if not env then
      return nil
    end
    local at = envelope_head(env)
    if at == id then
      return mid, nil, env
    elseif at < id then
      low = mid + 1
    else
      high = mid - 1
    end
  end
  return nil, low
end

-- The live summary with id, or nil. Summaries are kept oldest first (ids increasing): found by
-- bisection, each one read (LINDEX) at most once per call whatever it looks up (state.sums
-- keeps them), so a call that locates many summaries copies each at most once, not all of them
-- (up to MAX_SUMMARIES of up to 1 MiB) per summary located. A list out of order (an import
-- gives no order) is looked through whole, still each one once.
local function summary_of(k, id, state)
  local sums = state.sums
  if sums == nil then
    sums = {n = summaries_count(k)}
    state.sums = sums
  end
  local function at(i)
    local env = sums[i]
    if env == nil then
      env = summary_at(k, i)
      sums[i] = env
    end
    return env
  end
  local low, high = 0, sums.n - 1
  while low <= high do
    local mid = math.floor((low + high) / 2)
    local env = at(mid)
    if not env then
      break
    end
    local found = envelope_head(env)
    if found == id then
      return env
    elseif found < id then
      low = mid + 1
    else
      high = mid - 1
    end
  end
  for i = 0, sums.n - 1 do
    local env = at(i)
    if env and envelope_head(env) == id then
      return env
    end
  end
  return nil
end

-- The envelope of message id wherever it is (live, a live summary, archived), or nil; where
-- says which: 'live', 'summary' or 'archive'. state: {count = live messages, archive_base,
-- ix_next}: a message from ix_next on has no record yet (the index has not reached it) and is
-- looked for in the live list (a search ranks that tail itself: index_read.lua); without
-- ix_next, only indexed messages are found. It remembers the newest live id once read, and
-- the summaries it read. Every envelope is sized (lib/envelope.lua).
local function locate(k, docs, id, state)
  local kind, _, seq = docs.get(id)
  if seq > 0 then
    local at = seq - state.archive_base - 1
    if at >= 0 then
      local env = bounded(redis.call('LINDEX', k.archive, at), MAX_ENVELOPE_BYTES,
        'an archived message')
      if env then
        return env, 'archive'
      end
    end
    return nil
  end
  if kind == KINDS.summary then
    local env = summary_of(k, id, state)
    if env then
      return env, 'summary'
    end
    return nil
  end
  if kind == 0 and not (state.ix_next and id >= state.ix_next) then
    return nil
  end
  if state.count == 0 then
    return nil
  end
  if state.newest == nil then
    sized(k.msgs, 'msgs', state.count, MAX_ENVELOPE_BYTES)
    state.newest = envelope_head(bounded(redis.call('LINDEX', k.msgs, -1), MAX_ENVELOPE_BYTES,
      'a message'))
  end
  local at, _, env = live_index(k.msgs, id, state.count, state.newest)
  if at then
    env = bounded(env, MAX_ENVELOPE_BYTES, 'a message')
    -- Past the index, a pinned message is no document (never indexed), as it is below.
    if kind == 0 and select(2, envelope_id_priority(env)) == 0 then
      return nil
    end
    return env, 'live'
  end
  return nil
end
