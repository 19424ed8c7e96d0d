-- lib/segments_write.lua: storing, listing and deleting the index's segments (lib/segments.lua
-- says their layout).
-- USES: args segments

-- A segment's shape as the client declared it: 'sign,docs,first,last,buckets,blocks' checked.
local function seg_shape(text, what)
  -- one match of the whole text (digits alone: no field can be a float, a hex or a space)
  local sign, f2, f3, f4, f5, f6 = string.match(text, '^(%-?1),(%d+),(%d+),(%d+),(%d+),(%d+)$')
  local docs = sign and int_or_nil(f2, 1, 2 ^ 52)
  local first, last = sign and int_or_nil(f3, 1, 2 ^ 52), sign and int_or_nil(f4, 1, 2 ^ 52)
  local buckets = sign and int_or_nil(f5, 1, MAX_SEGMENT_FIELDS)
  local blocks = sign and int_or_nil(f6, 0, MAX_SEGMENT_FIELDS)
  sign = sign == '1' and 1 or (sign == '-1' and -1 or nil)
  if not sign or not docs or not first or not last
      or first > last or not buckets or not blocks or buckets + blocks > MAX_SEGMENT_FIELDS then
    fail('INVALID', what .. ' is not sign, docs, first, last, buckets, blocks')
  end
  return {sign = sign, docs = docs, first = first, last = last, buckets = buckets,
    blocks = blocks}
end

-- Checks (name, value) pairs from args[from] on: n of them, each 'b<k>' (k < buckets) or
-- 'p<j>' (j < blocks) of a segment of the given shape; field names prefixed by tag ('' or one
-- letter, for a call carrying two segments). Returns the HSET arguments for generation gen
-- (filled in later: a table {suffix, value} list) and the bytes.
local function seg_fields(args, from, n, shapes)
  local out, bytes = {}, 0
  for i = 0, n - 1 do
    local name, value = args[from + 2 * i], args[from + 2 * i + 1]
    local tag, kind, number = string.match(name, '^(%l?)([bp])(%d+)$')
    local shape = tag and shapes[tag]
    local at = shape and tonumber(number)
    if not shape or at >= (kind == 'b' and shape.buckets or shape.blocks) or #value == 0
        or #value > MAX_SEGMENT_FIELD_BYTES then
      fail('INVALID', 'segment field ' .. string.sub(name, 1, 16) .. ' is not a bucket or block '
        .. 'of its segment, or its value is empty or over ' .. MAX_SEGMENT_FIELD_BYTES .. ' bytes')
    end
    bytes = bytes + #value
    out[#out + 1] = {tag, (kind == 'b' and '.' or ':') .. number, value}
  end
  if bytes > MAX_CALL_BYTES then
    fail('TOOLARGE', 'segment fields of one call hold at most ' .. MAX_CALL_BYTES .. ' bytes')
  end
  return out, bytes
end

-- Writes parsed fields: gens maps a tag to its generation. Returns how many fields are new.
local function seg_write(k_ixseg, fields, gens)
  local added = 0
  local batch = {}
  for _, f in ipairs(fields) do
    batch[#batch + 1] = gens[f[1]] .. f[2]
    batch[#batch + 1] = f[3]
    if #batch >= 512 then
      added = added + redis.call('HSET', k_ixseg, unpack(batch))
      batch = {}
    end
  end
  if #batch > 0 then
    added = added + redis.call('HSET', k_ixseg, unpack(batch))
  end
  return added
end

local function seg_entry(gen, shape, size)
  return {gen, shape.sign, shape.docs, shape.first, shape.last, shape.buckets, shape.blocks,
    size}
end

-- Deletes garbage: at most budget fields of the segments garbage lists (parsed G, written
-- back here); returns the fields left.
local function seg_collect(k_ixseg, garbage, budget)
  if #garbage == 0 then
    return 0
  end
  local kept, left = {}, 0
  for _, g in ipairs(garbage) do
    local gen, buckets, blocks, at = g[1], tonumber(g[2]), tonumber(g[3]), tonumber(g[4])
    local total = buckets + blocks
    local names = {}
    while at < total and budget > 0 do
      if at < buckets then
        names[#names + 1] = gen .. '.' .. at
      else
        names[#names + 1] = gen .. ':' .. (at - buckets)
      end
      at = at + 1
      budget = budget - 1
    end
    for from = 1, #names, 512 do
      redis.call('HDEL', k_ixseg, unpack(names, from, math.min(from + 511, #names)))
    end
    if at < total then
      kept[#kept + 1] = {gen, buckets, blocks, at}
      left = left + total - at
    end
  end
  if #kept > 0 then
    redis.call('HSET', k_ixseg, 'G', seg_format(kept))
  else
    redis.call('HDEL', k_ixseg, 'G')
  end
  return left
end

-- Adds segments (gen, buckets, blocks) to garbage (parsed G); the caller writes it (with
-- seg_collect), having checked with seg_room that MAX_GARBAGE is not passed.
local function seg_discard(garbage, items)
  for _, item in ipairs(items) do
    garbage[#garbage + 1] = {item[1], item[2], item[3], 0}
  end
end

-- Refuses (COMPOZY_CONFLICT, before any write) when n more segments would pass MAX_GARBAGE:
-- the caller collects first (index_gc.lua).
local function seg_room(garbage, n)
  if #garbage + n > MAX_GARBAGE then
    fail('CONFLICT', 'the index has ' .. #garbage .. ' merged segments still to delete: collect '
      .. 'them first')
  end
end

-- Splits reservations into those still open at now (the server clock) and those past their
-- deadline, as {gen, buckets, blocks} for seg_discard (their fields are garbage, their inputs
-- free again once the caller writes R without them).
local function seg_expire(reservations, now)
  local kept, gone = {}, {}
  for _, r in ipairs(reservations) do
    if tonumber(r[2]) < now then
      gone[#gone + 1] = {r[1], r[11], r[12]}
    else
      kept[#kept + 1] = r
    end
  end
  return kept, gone
end
