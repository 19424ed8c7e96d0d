#!lua
-- index_merge.lua: a merge of segments, which a client read and merged: claim the inputs and
-- store (the first part of) the merged segment; publish it in place of the inputs.
-- USES: args clock deltas meta segments segments_write
-- KEYS: meta ixseg
-- ARGV: ttl_ms incarnation reservation inputs shape declared n_fields fields...
--   ttl_ms       the memory's TTL: ixseg gets meta's deadline (ttl_follow); 0 leaves it
--   incarnation  meta's incarnation when the inputs were read (index_read.lua): generations
--                start again in a memory that expired and was written again
--   reservation  0: a new merge of inputs: claims them, gives the output its generation and
--                stores the fields given; > 0: that merge's generation (it was begun before):
--                publishes it, with the fields given as its last part
--   inputs       the generations merged, '|'-separated (2..MAX_SEGMENTS), every one listed
--                and claimed by no other merge
--   shape        the output segment's 'sign,docs,first,last,buckets,blocks', or '' when the
--                inputs cancel out whole (nothing left to store)
--   declared     the fields the output has in all (its stored buckets and blocks)
--   n_fields     (name, value) pairs follow, 'b<k>' and 'p<j>' (at most STEP_FIELDS
--                and MAX_CALL_BYTES); with reservation 0 and fewer than declared, the merge
--                stays open: index_put.lua stores more, then a call with the reservation
--                publishes it
-- REPLY: {done gen segments}
--   done      1: published (the inputs are garbage now, deleted a step at a time by
--             index_gc.lua); 0: open, under reservation gen, until MERGE_LEASE_MS from its
--             last step
--   segments  the segments listed after this call
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE, COMPOZY_CONFLICT (an input is
-- no longer listed, or claimed by another merge, or the reservation ran out, or the memory is
-- not the one whose inputs were read: merge again), COMPOZY_FORMAT
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local reservation = int_arg(a_reservation, 'reservation', 0, nil)
local declared = int_arg(a_declared, 'declared', 0, MAX_SEGMENT_FIELDS)
local n_fields = int_arg(a_n_fields, 'n_fields', 0, STEP_FIELDS)
if #ARGV ~= ARGS_FROM - 1 + 2 * n_fields then
  fail('INVALID', 'expected ' .. n_fields .. ' field pairs')
end
local inputs, wanted = {}, {}
for gen in string.gmatch(a_inputs, '[^|]+') do
  local g = int_arg(gen, 'an input generation', 1, nil)
  if wanted[g] then
    fail('INVALID', 'input ' .. g .. ' is named twice')
  end
  inputs[#inputs + 1] = g
  wanted[g] = true
end
if #inputs < 2 or #inputs > MAX_SEGMENTS then
  fail('INVALID', 'a merge takes 2 to ' .. MAX_SEGMENTS .. ' segments')
end
local shape = nil
if a_shape ~= '' then
  shape = seg_shape(a_shape, 'the merged segment')
end
if (shape == nil) ~= (declared == 0) or declared > (shape and shape.buckets + shape.blocks or 0)
    or n_fields > declared then
  fail('INVALID', 'declared fields do not fit the merged segment')
end
local fields, bytes = seg_fields(ARGV, ARGS_FROM, n_fields, {[''] = shape})

local m = meta_read(k_meta, {'fmt', 'inc', 'ix_gen', 'ix_nseg'})
check_format(m)
if m.inc == nil or m.inc ~= a_incarnation or (tonumber(m.fmt) or 1) < DATA_FORMAT then
  fail('CONFLICT', 'the index was dropped meanwhile, or the memory expired and was written '
    .. 'again: merge again')
end
local list, reservations, garbage = seg_read(k_ixseg, 'L', 'R', 'G')
local now = now_ms()
local expired
reservations, expired = seg_expire(reservations, now)
seg_room(garbage, #inputs + #expired)
local listed = {}
for _, e in ipairs(list) do
  listed[tonumber(e[1])] = true
end
local inputs_text = table.concat(inputs, '|')
local mine, claimed = nil, {}
for i, r in ipairs(reservations) do
  if tonumber(r[1]) == reservation and reservation > 0 then
    mine = i
  else
    for gen in string.gmatch(r[3], '[^|]+') do
      claimed[tonumber(gen)] = true
    end
  end
end
for _, g in ipairs(inputs) do
  if not listed[g] or claimed[g] then
    fail('CONFLICT', 'segment ' .. g .. ' is no longer listed, or another merge has it')
  end
end
if reservation > 0 and (not mine or reservations[mine][3] ~= inputs_text) then
  fail('CONFLICT', 'merge ' .. reservation .. ' ran out of time or is another merge')
end

local gen, written, size = reservation, 0, bytes
if reservation > 0 then
  local r = reservations[mine]
  if not shape or table.concat({r[7], r[8], r[9], r[10], r[11], r[12]}, ',')
      ~= table.concat({shape.sign, shape.docs, shape.first, shape.last, shape.buckets,
        shape.blocks}, ',') or tonumber(r[4]) ~= declared then
    fail('INVALID', 'merge ' .. reservation .. ' was begun with another shape')
  end
  written, size = tonumber(r[5]), tonumber(r[6]) + bytes
end
-- Fields stored before (a step sent again) are not counted twice.
local new = #fields
if reservation > 0 then
  for _, f in ipairs(fields) do
    new = new - redis.call('HEXISTS', k_ixseg, gen .. f[2])
  end
end
if written + new > declared then
  fail('INVALID', 'more fields than the ' .. declared .. ' declared')
end
if reservation == 0 then
  gen = (tonumber(m.ix_gen) or 0) + 1
  redis.call('HSET', k_meta, 'ix_gen', gen)
end
if shape then
  written = written + seg_write(k_ixseg, fields, {[''] = gen})
end
if written < declared then
  if reservation > 0 and n_fields == 0 then
    fail('INVALID', 'merge ' .. gen .. ' holds ' .. written .. ' of its ' .. declared .. ' fields')
  end
  local entry = {gen, now + MERGE_LEASE_MS, inputs_text, declared, written, size,
    shape.sign, shape.docs, shape.first, shape.last, shape.buckets, shape.blocks}
  if mine then
    reservations[mine] = entry
  else
    reservations[#reservations + 1] = entry
  end
  redis.call('HSET', k_ixseg, 'R', seg_format(reservations))
  if #expired > 0 then
    seg_discard(garbage, expired)
    seg_collect(k_ixseg, garbage, 0)
  end
  ttl_follow(k_meta, {k_ixseg}, ttl_ms)
  return {0, gen, #list}
end
-- Publish: the output takes the inputs' place, they go to the garbage.
local kept, gone = {}, {}
for _, e in ipairs(list) do
  if wanted[tonumber(e[1])] then
    gone[#gone + 1] = {e[1], e[6], e[7]}
  else
    kept[#kept + 1] = e
  end
end
if shape then
  kept[#kept + 1] = seg_entry(gen, shape, size)
end
if mine then
  table.remove(reservations, mine)
end
redis.call('HSET', k_ixseg, 'L', seg_format(kept), 'R', seg_format(reservations))
seg_discard(garbage, gone)
seg_discard(garbage, expired)
seg_collect(k_ixseg, garbage, GC_STEP_FIELDS)
redis.call('HSET', k_meta, 'ix_nseg', #kept)
ttl_follow(k_meta, {k_ixseg}, ttl_ms)
return {1, gen, #kept}
