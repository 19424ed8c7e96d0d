#!lua flags=no-writes
-- index_read.lua: what a search or a merge reads of the index: the segment list, BM25's
-- counts, the live messages the index has not reached yet, and fields of listed segments, in
-- one consistent read.
-- USES: args envelope meta query segments
-- KEYS: msgs meta ixseg ixdocs
-- ARGV: tail gens fields...
--   tail    at most this many live messages past the index to return, 0..SEARCH_TAIL_DOCS
--           (0: none; a merge's reads): the newest, SEARCH_TAIL_BYTES of them and at most
--           one envelope more, returned oldest first
--   gens    the generations the fields belong to, '|'-separated ('' with no fields: the list
--           alone); if one is no longer listed, no field is read (stale = 1: read the list
--           again)
--   fields  at most INDEX_READ_FIELDS names '<gen>.<k>' (a bucket) or '<gen>:<j>' (a block),
--           INDEX_READ_BYTES in all
-- REPLY: {fmt analyzer unindexed n_docs total_length garbage stale list reservations incarnation ix_next tail[] values...}
--   fmt           meta's data format: below DATA_FORMAT the index is being built again and
--                 searches nothing yet (0: search was turned off: there is none)
--   analyzer      the analyser version the index was built with ('' before any)
--   unindexed     messages this read leaves unsearchable: those not indexed yet (the live
--                 tail past the index, the archive a rebuild has still to reach) less the
--                 tail returned
--   n_docs, total_length  live documents and their total length (BM25's N and average)
--   garbage       1 when merged segments' fields wait to be deleted (index_gc.lua)
--   list, reservations  ixseg's L and R as stored (lib/segments.lua)
--   incarnation   meta's incarnation ('' for none): a merge of what was read is stored only in
--                 it (generations start again in a memory that expired and was written again)
--   ix_next       the first id the index has not reached
--   tail          the newest live envelopes from ix_next on (pinned ones too: the client
--                 passes over them, as the indexer does), at most tail of them, oldest first;
--                 none while the index is built again
--   values        each field's value in the order asked; nil for an empty bucket
-- Work follows the bytes read: each field's length is checked (HSTRLEN) before it is read,
-- so a field written raw to many megabytes is refused (COMPOZY_CORRUPT), never copied; the
-- live list is sized as a whole before its tail is read.
local tail_max = a_tail == '0' and 0 or int_arg(a_tail, 'tail', 0, SEARCH_TAIL_DOCS)
local n = #ARGV - ARGS_FROM + 1
if n > INDEX_READ_FIELDS then
  fail('INVALID', 'at most ' .. INDEX_READ_FIELDS .. ' fields a read, got ' .. n)
end
local gens = {}
for gen in string.gmatch(a_gens, '[^|]+') do
  gens[#gens + 1] = int_arg(gen, 'a generation', 1, nil)
  if #gens > MAX_SEGMENTS then
    fail('INVALID', 'at most ' .. MAX_SEGMENTS .. ' generations')
  end
end
for i = ARGS_FROM, #ARGV do
  if #ARGV[i] > 32 or not string.match(ARGV[i], '^%d+[.:]%d+$') then
    fail('INVALID', 'field ' .. string.sub(ARGV[i], 1, 32) .. ' names no segment field')
  end
end
-- Only the index's own keys (and the live list, when its tail is read) are checked for
-- eviction here: the hits are fetched (and the other keys checked) by search_fetch.lua or
-- context.lua.
local m = guarded(K, {'index', tail_max > 0 and 'msgs' or nil},
  {'ix_next', 'ix_seq', 'ix_len', 'ix_an', 'ix_nseg', 'last_id'})
local list, reservations, garbage = seg_read(k_ixseg, 'L', 'R', 'G')
local fmt = m.ix_off and 0 or (tonumber(m.fmt) or 1)
local ix_next = tonumber(m.ix_next) or 0
local left = unindexed(m)
-- The live tail past the index: the newest first, read back from the list's end one
-- envelope a read (a list's items cannot be sized before they are copied, and a message may
-- be 1 MiB), so past the bytes' bound by at most that one; returned oldest first. A backlog
-- longer than the tail leaves its oldest unread (counted in unindexed): what was just
-- written is always searched.
local tail = {}
local last_id, count = tonumber(m.last_id) or 0, tonumber(m.count) or 0
if tail_max > 0 and fmt >= DATA_FORMAT and ix_next <= last_id and count > 0 then
  sized(k_msgs, 'msgs', count, MAX_ENVELOPE_BYTES)
  local from = math.max(ix_next, 1)
  local most = math.min(tail_max, count, last_id - from + 1)
  local newest, bytes = {}, 0
  while #newest < most and bytes < SEARCH_TAIL_BYTES do
    local env = bounded(redis.call('LINDEX', k_msgs, -1 - #newest), MAX_ENVELOPE_BYTES,
      'a message')
    if not env or envelope_head(env) < from then
      break  -- the list's start, or indexed (ids not live between: a summary's)
    end
    newest[#newest + 1] = env
    bytes = bytes + #env
  end
  for i = #newest, 1, -1 do
    tail[#tail + 1] = newest[i]
  end
  left = math.max(0, left - #tail)
end
local out = {fmt, m.ix_an or '', left, tonumber(m.ix_docs) or 0,
  tonumber(m.ix_len) or 0, #garbage > 0 and 1 or 0, 0, seg_format(list),
  seg_format(reservations), m.inc or '', ix_next, #tail}
for _, env in ipairs(tail) do
  out[#out + 1] = env
end
local listed = {}
for _, e in ipairs(list) do
  listed[tonumber(e[1])] = true
end
for _, g in ipairs(gens) do
  if not listed[g] then
    out[7] = 1
    return out
  end
end
local bytes = 0
for i = ARGS_FROM, #ARGV do
  local size = redis.call('HSTRLEN', k_ixseg, ARGV[i])
  if size > MAX_SEGMENT_FIELD_BYTES then
    fail('CORRUPT', 'index field ' .. ARGV[i] .. ' holds ' .. size .. ' bytes; a segment field '
      .. 'has at most ' .. MAX_SEGMENT_FIELD_BYTES .. ': it was not written by compozy-memory')
  end
  bytes = bytes + size
  if bytes > INDEX_READ_BYTES then
    fail('TOOLARGE', 'the fields asked hold more than ' .. INDEX_READ_BYTES .. ' bytes: read '
      .. 'them in smaller calls')
  end
end
for from = ARGS_FROM, #ARGV, 1000 do
  local values = redis.call('HMGET', k_ixseg, unpack(ARGV, from, math.min(from + 999, #ARGV)))
  for i = 1, #values do
    out[#out + 1] = values[i]
  end
end
return out
