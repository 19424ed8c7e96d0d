-- lib/postings.lua: one term's postings, packed, in the index's ixpost HASH.
-- USES: packed
--
-- A posting is (id, tf, length): a document holding the term, how often, and the document's
-- length in terms (BM25 needs it, and reading it here saves a lookup per posting). Postings
-- are packed as varints: the id as the zigzag delta from the previous posting's id (ids come
-- in increasing order in practice, so a delta is one or two bytes, but any order is kept),
-- then tf, then length. A term's postings are split into blocks of POSTINGS_BLOCK:
--   field <term>          the header, then the newest postings (the tail, fewer than a block):
--                         varints df first nb tail_base last tailn dirhigh, then the tail's
--                         postings
--       df         documents holding the term that are still alive (exact once the removed
--                  ones were processed: see index.lua)
--       first, nb  the oldest and newest sealed block still stored (first > nb: none)
--       tail_base  the id the tail's first delta is taken from; last: the newest id
--       dirhigh    the largest id of the newest sealed block (the directory's next entry is
--                  a delta from it, so sealing appends to the directory without reading it)
--   field <term>\0<k>     sealed block k: varints base n, then its n postings
--   field <term>\0        the directory: for each sealed block from first, varints of its
--                         smallest and largest id (zigzag deltas from the previous entry's
--                         largest), so the block holding an id is found without reading blocks
-- A posting of a removed document stays in its block until compaction rewrites the block;
-- readers skip it (its document is marked dead).

local function zigzag(d)
  if d >= 0 then
    return 2 * d
  end
  return -2 * d - 1
end

local function unzigzag(z)
  if z % 2 == 0 then
    return z / 2
  end
  return -(z + 1) / 2
end

-- Decodes n postings from byte table b at position at, ids from base: three arrays.
local function decode_postings(b, at, n, base)
  local ids, tfs, lengths = {}, {}, {}
  local id = base
  local z, tf, length
  for i = 1, n do
    z, at = get_varint(b, at)
    id = id + unzigzag(z)
    tf, at = get_varint(b, at)
    length, at = get_varint(b, at)
    ids[i], tfs[i], lengths[i] = id, tf, length
  end
  return ids, tfs, lengths
end

-- A header as a table (its tail's postings as the packed string they are), or a new one.
-- Only the six varints in front are read: appending to a term, or changing its df, never
-- decodes its postings.
local function header_read(value)
  if not value then
    return {df = 0, first = 1, nb = 0, base = 0, last = 0, tailn = 0, dirhigh = 0, tail = ''}
  end
  local b = {string.byte(value, 1, 60)}  -- seven varints of at most 8 bytes (ids < 2^52)
  local h, at = {}, 1
  h.df, at = get_varint(b, at)
  h.first, at = get_varint(b, at)
  h.nb, at = get_varint(b, at)
  h.base, at = get_varint(b, at)
  h.last, at = get_varint(b, at)
  h.tailn, at = get_varint(b, at)
  h.dirhigh, at = get_varint(b, at)
  h.tail = string.sub(value, at)
  return h
end

-- The tail's postings: ids, tfs, lengths.
local function tail_postings(h)
  return decode_postings(text_bytes(h.tail), 1, h.tailn, h.base)
end

-- A sealed block's postings: ids, tfs, lengths (nil when the block is gone).
local function block_read(value)
  if not value then
    return nil
  end
  local b = text_bytes(value)
  local base, at = get_varint(b, 1)
  local n
  n, at = get_varint(b, at)
  return decode_postings(b, at, n, base)
end

-- The directory's entries from block first: {{smallest, largest}, ...} in block order.
local function directory_read(value)
  local entries = {}
  if not value or value == '' then
    return entries
  end
  local b = text_bytes(value)
  local at, previous = 1, 0
  while at <= #b do
    local low, high
    low, at = get_varint(b, at)
    high, at = get_varint(b, at)
    low = previous + unzigzag(low)
    high = low + high
    entries[#entries + 1] = {low, high}
    previous = high
  end
  return entries
end

-- Reads a term's postings newest first, at most most of them, calling visit(id, tf, length)
-- for each; returns how many were read.
local function postings_newest(k_ixpost, term, h, most, visit)
  local read = 0
  if h.tailn > 0 then
    local ids, tfs, lengths = tail_postings(h)
    for i = #ids, 1, -1 do
      if read >= most then
        return read
      end
      read = read + 1
      visit(ids[i], tfs[i], lengths[i])
    end
  end
  for block = h.nb, h.first, -1 do
    if read >= most then
      return read
    end
    local ids, tfs, lengths = block_read(redis.call('HGET', k_ixpost, term .. '\0' .. block))
    if ids then
      for i = #ids, 1, -1 do
        if read >= most then
          return read
        end
        read = read + 1
        visit(ids[i], tfs[i], lengths[i])
      end
    end
  end
  return read
end

-- The tf of term in each of the documents wanted (a set of ids), reading at most blocks
-- sealed blocks; returns id -> tf for those found and the blocks it read. Documents in
-- blocks past the bound are left out (the caller scores them without this term).
local function postings_lookup(k_ixpost, term, h, wanted, blocks)
  local found, read = {}, 0
  if h.tailn > 0 then
    local ids, tfs = tail_postings(h)
    for i = 1, #ids do
      if wanted[ids[i]] then
        found[ids[i]] = tfs[i]
      end
    end
  end
  if h.nb < h.first then
    return found, read
  end
  local directory = directory_read(redis.call('HGET', k_ixpost, term .. '\0'))
  -- The blocks whose id range holds a wanted document (found by binary search in the
  -- wanted ids, sorted), newest first.
  local sorted = {}
  for id in pairs(wanted) do
    if not found[id] then
      sorted[#sorted + 1] = id
    end
  end
  table.sort(sorted)
  for e = #directory, 1, -1 do
    if read >= blocks or #sorted == 0 then
      break
    end
    local low, high = directory[e][1], directory[e][2]
    local lo, hi = 1, #sorted  -- the first wanted id >= low
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if sorted[mid] < low then
        lo = mid + 1
      else
        hi = mid
      end
    end
    if sorted[lo] >= low and sorted[lo] <= high then
      read = read + 1
      local ids, tfs = block_read(redis.call('HGET', k_ixpost, term .. '\0' .. (h.first + e - 1)))
      if ids then
        for i = 1, #ids do
          if wanted[ids[i]] then
            found[ids[i]] = tfs[i]
          end
        end
      end
    end
  end
  return found, read
end
