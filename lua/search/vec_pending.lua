#!lua flags=no-writes
-- vec_pending.lua: what the vector step has to embed next, bounded: indexed messages and
-- summaries without a vector yet, by id.
-- USES: args docs envelope meta
-- KEYS: msgs meta archive summaries ixdocs ixgone ixvec
-- ARGV: max_docs max_bytes
--   max_docs   at most this many messages, 1..VECTOR_STEP_DOCS
--   max_bytes  and envelopes of at most about this many bytes in all (at least one)
-- REPLY: {model vx_next upto names envelope[]}
--   model     the model the stored vectors were made with ('' before any)
--   vx_next   meta's vx_next: every indexed message with a smaller id has its vector, or
--             wants none (pinned messages are not indexed; the archive's cap dropped some)
--   upto      vec_apply.lua moves vx_next past this id; vx_next - 1 when there is nothing to
--             do: every id up to meta's ix_next - 1 is done (the newest wait for the indexer)
--   names     the speaker names kept beside the vectors, tab-separated
--   envelope  the messages to embed, by id: live ones, summaries and archived ones alike
-- At most VECTOR_SCAN_IDS ids are looked through a call. While an index is rebuilt its records
-- are incomplete, so nothing is returned until the rebuild is done.
local max_docs = int_arg(a_max_docs, 'max_docs', 1, VECTOR_STEP_DOCS)
local max_bytes = int_arg(a_max_bytes, 'max_bytes', 1, MAX_CALL_BYTES)
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone', 'vectors'},
  {'ix_next', 'ix_seq', 'vx_next', 'vx_model', 'vx_names'})
local vx_next = math.max(tonumber(m.vx_next) or 1, 1)
local ix_next = tonumber(m.ix_next) or 0
local out = {m.vx_model or '', vx_next, vx_next - 1, m.vx_names or ''}
if (tonumber(m.fmt) or 1) < DATA_FORMAT or (tonumber(m.ix_seq) or 0) > 0
    or vx_next >= ix_next then
  out[#out + 1] = 0
  return out
end

-- 1. The indexed ids from vx_next on: a record's first byte is its kind (0: none), read
-- straight from the blocks, a block missing as a whole passed over at once.
local last = math.min(ix_next - 1, vx_next + VECTOR_SCAN_IDS - 1)
local first_block, last_block = math.floor(vx_next / DOC_BLOCK), math.floor(last / DOC_BLOCK)
local fields = {}
for b = first_block, last_block do
  fields[#fields + 1] = tostring(b)
end
for _, field in ipairs(fields) do
  doc_sized(k_ixdocs, field)
end
local blocks = redis.call('HMGET', k_ixdocs, unpack(fields))
local wanted, upto = {}, last
for i, block in ipairs(blocks) do
  if block then
    local base = (first_block + i - 1) * DOC_BLOCK
    for id = math.max(base, vx_next), math.min(base + DOC_BLOCK - 1, last) do
      local at = (id % DOC_BLOCK) * DOC_SIZE + 1
      local kind = string.byte(block, at)
      if kind and kind ~= 0 then
        if #wanted >= max_docs then
          upto = id - 1
          break
        end
        local _, _, seq = doc_decode(block, id)
        wanted[#wanted + 1] = {id, kind, seq}
      end
    end
    if upto < last then
      break
    end
  end
end

-- 2. Their envelopes: archived ones by seq, summaries from their short list, live ones from
-- where the first of them sits (the live list holds them in id order, pinned ones between).
local found, live, archived = {}, {}, {}
local summaries = nil
for _, w in ipairs(wanted) do
  local id, kind, seq = w[1], w[2], w[3]
  if seq > 0 then
    archived[#archived + 1] = seq
  elseif kind == KINDS.summary then
    if not summaries then
      summaries = {}
      for _, env in ipairs(summaries_read(K)) do
        summaries[envelope_head(env)] = env
      end
    end
    found[id] = summaries[id]
  else
    live[#live + 1] = id
  end
end
-- Archived ones by runs of consecutive seqs, one LRANGE a run (most are one run).
table.sort(archived)
local base = tonumber(m.archive_base) or 0
local run = 1
while run <= #archived do
  local last_run = run
  while last_run < #archived and archived[last_run + 1] == archived[last_run] + 1 do
    last_run = last_run + 1
  end
  local at = archived[run] - base - 1
  if at + last_run - run >= 0 then
    for _, env in ipairs(envelopes_read(k_archive, 'an archived message', math.max(at, 0),
        at + last_run - run)) do
      found[envelope_head(env)] = env
    end
  end
  run = last_run + 1
end
if #live > 0 then
  local count = tonumber(m.count) or 0
  local at, insert = live_index(k_msgs, live[1], count)
  at = at or insert
  local next_live = 1
  while next_live <= #live and at < count do
    local chunk = envelopes_read(k_msgs, 'a message', at, at + #live - next_live)
    if #chunk == 0 then
      break
    end
    for _, env in ipairs(chunk) do
      local id = envelope_head(env)
      while next_live <= #live and live[next_live] < id do
        next_live = next_live + 1  -- gone from the live list meanwhile: not in this read
      end
      if live[next_live] == id then
        found[id] = env
        next_live = next_live + 1
      end
    end
    at = at + #chunk
  end
end

-- 3. In id order, within the bytes: the step covers up to just before the first left out.
local envelopes, bytes = {}, 0
for _, w in ipairs(wanted) do
  local env = found[w[1]]
  if env then
    if #envelopes > 0 and bytes + #env > max_bytes then
      upto = w[1] - 1
      break
    end
    envelopes[#envelopes + 1] = env
    bytes = bytes + #env
  end
end
out[3] = upto
out[#out + 1] = #envelopes
for i = 1, #envelopes do
  out[#out + 1] = envelopes[i]
end
return out
