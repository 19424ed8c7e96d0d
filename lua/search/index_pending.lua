#!lua flags=no-writes
-- index_pending.lua: what the indexer has to do next, bounded: messages to index, removed
-- documents whose terms still count.
-- USES: args docs envelope meta
-- KEYS: msgs meta archive summaries ixdocs ixgone
-- ARGV: max_docs max_bytes archive_max
--   max_docs   at most this many documents of each kind, 1..INDEX_STEP_DOCS
--   max_bytes  and envelopes of at most about this many bytes in all (at least one)
--   archive_max  the archive's cap (0: none): over it, index_apply.lua drops the excess
-- REPLY: {fmt analyzer ix_next upto seq_from seq_upto last_id over_cap incarnation adds[3] gones[]}
--   fmt       meta's data format: below DATA_FORMAT, the index must be rebuilt first
--             (index_reset.lua) and nothing else is returned; 0 when search was turned off
--             (there is no index to keep current)
--   analyzer  the analyser version the index was built with ('' before any)
--   ix_next, upto      the live messages and summaries to index are those with ids from
--                      ix_next to upto (index_apply.lua moves ix_next past upto); ids in that
--                      range not returned are pinned or gone
--   seq_from, seq_upto while an index is rebuilt (seq_from > 0), the archive envelopes from
--                      seq_from to seq_upto not indexed yet are returned too
--   last_id   meta's last id: how far the live part has to go
--   over_cap  archived envelopes past archive_max (a step drops some even with nothing to
--             index: the cap may have shrunk)
--   incarnation  meta's incarnation ('' for none): index_add.lua applies the step only to it
--             (a memory that expired and was written again starts its ids and ix_next again)
--   adds      (where, seq, envelope) triples: where is 'l' (live), 's' (a summary) or 'a'
--             (archived, at seq), oldest first
--   gones     envelopes the archive's cap dropped, oldest first (ixgone's head)
local max_docs = int_arg(a_max_docs, 'max_docs', 1, INDEX_STEP_DOCS)
local max_bytes = int_arg(a_max_bytes, 'max_bytes', 1, MAX_CALL_BYTES)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'},
  {'ix_next', 'ix_seq', 'ix_an', 'last_id'})
local fmt = m.ix_off and 0 or (tonumber(m.fmt) or 1)
local last_id = tonumber(m.last_id) or 0
if fmt < DATA_FORMAT then
  return {fmt, '', 0, 0, 0, 0, last_id, 0, m.inc or '', 0, 0}
end
local ix_next = tonumber(m.ix_next) or 0
local count = tonumber(m.count) or 0
local bytes = 0
local function room(n, env)
  return n < max_docs and (n == 0 or bytes + #env <= max_bytes)
end

-- The live tail from ix_next (at most max_docs of it) and the summaries, merged by id.
local live = {}
if ix_next <= last_id and count > 0 then
  local at, insert = live_index(k_msgs, ix_next, count)
  at = at or insert
  live = envelopes_read(k_msgs, 'a message', at, at + max_docs, count)
end
local limit = last_id
if #live > max_docs then
  limit = envelope_head(live[max_docs + 1]) - 1
  live[max_docs + 1] = nil
end
local candidates = {}
for _, env in ipairs(live) do
  local id, priority = envelope_id_priority(env)
  candidates[#candidates + 1] = {id, 'l', env, priority}
end
local live_only = #candidates
-- Summaries are kept oldest first (ids increasing) and those below ix_next are indexed: read
-- from the newest back to the first of those, not every one on every call (a summary may be
-- 1 MiB, and a caught-up index asks often).
for i = summaries_count(K) - 1, 0, -1 do
  local env = summary_at(K, i)
  local id = envelope_head(env)
  if id < ix_next then
    break
  end
  if id <= limit then
    candidates[#candidates + 1] = {id, 's', env, 1}
  end
end
if #candidates > live_only then  -- (the live tail alone is in id order already)
  table.sort(candidates, function(x, y) return x[1] < y[1] end)
end
local adds, taken, upto = {}, 0, limit
for _, c in ipairs(candidates) do
  if c[4] ~= 0 then  -- pinned messages are never indexed: passed over
    if not room(taken, c[3]) then
      upto = c[1] - 1
      break
    end
    adds[#adds + 1] = c[2]
    adds[#adds + 1] = 0
    adds[#adds + 1] = c[3]
    bytes = bytes + #c[3]
    taken = taken + 1
  end
end

-- While rebuilding: archive envelopes whose record is missing.
local seq_from = tonumber(m.ix_seq) or 0
local seq_upto = 0
if seq_from > 0 then
  local base = tonumber(m.archive_base) or 0
  local archived = tonumber(m.archived) or 0
  seq_from = math.max(seq_from, base + 1)
  seq_upto = seq_from - 1
  local chunk = envelopes_read(k_archive, 'an archived message', seq_from - base - 1,
    seq_from - base + max_docs - 2)
  local docs = doc_reader(k_ixdocs)
  local n = taken  -- the live part comes first; one step holds max_docs documents in all
  for i, env in ipairs(chunk) do
    if not room(n, env) then
      break
    end
    local id, priority = envelope_id_priority(env)
    seq_upto = seq_from + i - 1
    if priority ~= 0 and docs.get(id) == 0 then
      adds[#adds + 1] = 'a'
      adds[#adds + 1] = seq_upto
      adds[#adds + 1] = env
      bytes = bytes + #env
      n = n + 1
    end
  end
  if #chunk == 0 then
    seq_upto = archived
  end
end

local gones = {}
if (tonumber(m.ix_gone) or 0) > 0 then
  local n = 0
  for _, env in ipairs(envelopes_read(k_ixgone, 'a dropped message', 0, max_docs - 1)) do
    if not room(n, env) then
      break
    end
    gones[#gones + 1] = env
    bytes = bytes + #env
    n = n + 1
  end
end

local over_cap = 0
if archive_max > 0 then
  over_cap = math.max(0, (tonumber(m.archived) or 0) - (tonumber(m.archive_base) or 0)
    - archive_max)
end
local out = {fmt, m.ix_an or '', ix_next, upto, seq_from, seq_upto, last_id, over_cap,
  m.inc or '', #adds / 3}
for i = 1, #adds do
  out[#out + 1] = adds[i]
end
out[#out + 1] = #gones
for i = 1, #gones do
  out[#out + 1] = gones[i]
end
return out
