-- lib/segments.lua: the search index's segments as the server keeps them: bytes it stores,
-- lists and deletes, never decodes (compozy_memory/_search/segments.py builds, merges and
-- reads them on the clients).
-- USES: (none)
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

local function seg_parse(text)
  local out = {}
  if not text or text == '' then
    return out
  end
  for item in string.gmatch(text, '[^;]+') do
    local f = {}
    for n in string.gmatch(item, '[^,]+') do
      f[#f + 1] = n
    end
    out[#out + 1] = f
  end
  return out
end

local function seg_format(entries)
  local parts = {}
  for i, f in ipairs(entries) do
    parts[i] = table.concat(f, ',')
  end
  return table.concat(parts, ';')
end
