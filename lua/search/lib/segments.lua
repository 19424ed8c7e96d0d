-- lib/segments.lua: the search index's segments as the server keeps them: bytes it stores,
-- lists and deletes, never decodes (compozy_memory/_search/segments.py builds, merges and
-- reads them on the clients).
-- USES: args
--
-- ixseg is a HASH. Field 'L' lists the live segments, 'R' the merges in progress, 'G' the
-- segments whose fields are being deleted; every other field belongs to one segment:
--   '<gen>.<k>'  bucket k of segment gen's dictionary (0 <= k < buckets; an empty one absent)
--   '<gen>:<j>'  postings block j of segment gen (0 <= j < blocks)
-- so a segment's fields follow from its list entry. Generations come from meta's ix_gen and
-- are never reused, so a reader holding an old list reads nothing of another segment.
--   L  'gen,sign,docs,first,last,buckets,blocks,size;...' (sign 1, or -1: removed documents)
--   R  'gen,deadline_ms,inputs,declared,written,size,sign,docs,first,last,buckets,blocks;...'
--      (inputs 'gen|gen|...'): a merge writing its output (one segment of declared fields) a
--      step at a time before it publishes it; past its deadline, its fields are garbage
--   G  'gen,buckets,blocks,next;...': fields still to delete, from field number next on
-- Segment fields arrive as (name, value) pairs named 'b<k>' / 'p<j>' (a bucket, a block),
-- prefixed here with the generation the script gives the segment.

-- One entry of each width as the scripts write it: integers (R's third field: the inputs,
-- '|'-separated), matched whole by one pattern rather than field by field (a library's loading
-- may call no function: written out). No group can split a run of digits two ways (a
-- '%d+[%d|]*' would, and backtrack quadratically over a long planted run).
local SEG_PATTERN = {
  [4] = '^(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+)$',
  [8] = '^(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+)$',
  [12] = '^(%-?%d+),(%-?%d+),(%d[%d|]*),(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+),'
    .. '(%-?%d+),(%-?%d+),(%-?%d+),(%-?%d+)$',
}

-- Parses a bookkeeping field's text into entries of width fields each (COMPOZY_CORRUPT for
-- text no script wrote: a field that is not an integer, or R's inputs not 'gen|gen...', would
-- otherwise fail the script half-way, after some of its writes, with a bare Lua error).
local function seg_parse(text, width)
  local out = {}
  if not text or text == '' then
    return out
  end
  local pattern = SEG_PATTERN[width]
  for item in string.gmatch(text, '[^;]+') do
    local f = {string.match(item, pattern)}
    local ok = #f == width
    for i = 1, ok and width or 0 do
      if #f[i] > ((width == 12 and i == 3) and 17 * MAX_SEGMENTS or 16) then
        ok = false
      end
    end
    if not ok then
      fail('CORRUPT', 'the index holds a bookkeeping entry no script wrote: '
        .. string.sub(item, 1, 40))
    end
    out[#out + 1] = f
  end
  return out
end

-- The widths of L, R and G's entries.
local SEG_WIDTH = {L = 8, R = 12, G = 4}

-- ixseg's bookkeeping fields (names among 'L', 'R', 'G') as stored, in that order ('' for
-- none), each sized first: one past SEGMENT_STATE_BYTES (far more than the scripts write) is
-- refused (COMPOZY_CORRUPT), never read. For a script that passes them on or appends to them
-- without reading their entries (the indexer that gets them back parses and checks them:
-- compozy_memory/_search/runtime/index_calls.py).
local function seg_texts(k_ixseg, ...)
  local names = {...}
  for _, name in ipairs(names) do
    local size = redis.call('HSTRLEN', k_ixseg, name)
    if size > SEGMENT_STATE_BYTES then
      fail('CORRUPT', 'the index\'s ' .. name .. ' field holds ' .. size .. ' bytes, more '
        .. 'than its scripts ever write: it was not written by compozy-memory')
    end
  end
  local values = redis.call('HMGET', k_ixseg, unpack(names))
  for i = 1, #names do
    values[i] = values[i] or ''
  end
  return unpack(values)
end

-- The entries of a bookkeeping field's text, counted by their separators (plain finds, in C)
-- without parsing them.
local function seg_count(text)
  if text == '' then
    return 0
  end
  local n, at = 1, 1
  while true do
    local found = string.find(text, ';', at, true)
    if not found then
      return n
    end
    n = n + 1
    at = found + 1
  end
end

-- The same fields parsed (seg_parse), in that order.
local function seg_read(k_ixseg, ...)
  local names = {...}
  local texts = {seg_texts(k_ixseg, ...)}
  local out = {}
  for i, name in ipairs(names) do
    out[i] = seg_parse(texts[i], SEG_WIDTH[name])
  end
  return unpack(out)
end

local function seg_format(entries)
  local parts = {}
  for i, f in ipairs(entries) do
    parts[i] = table.concat(f, ',')
  end
  return table.concat(parts, ';')
end
