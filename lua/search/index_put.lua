#!lua
-- index_put.lua: one step of an open merge (index_merge.lua): more of the merged segment's
-- fields.
-- USES: args clock deltas segments segments_write
-- KEYS: meta ixseg
-- ARGV: ttl_ms incarnation reservation n_fields fields...
--   ttl_ms       the memory's TTL: ixseg gets meta's deadline (ttl_follow); 0 leaves it
--   incarnation  meta's incarnation as the merge read it (index_merge.lua)
--   reservation  the merge's generation, as index_merge.lua gave it
--   n_fields     (name, value) pairs follow, 'b<k>' and 'p<j>' of the merged segment (at most
--                STEP_FIELDS and MAX_CALL_BYTES)
-- REPLY: {written declared}
--   written  the merge's fields stored so far, of declared; the step also moves the merge's
--            deadline to MERGE_LEASE_MS from now
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_TOOLARGE, COMPOZY_CONFLICT (the merge ran
-- out of time, or was published or never begun, or the memory expired and was written again:
-- merge again)
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local reservation = int_arg(a_reservation, 'reservation', 1, nil)
local n_fields = int_arg(a_n_fields, 'n_fields', 1, STEP_FIELDS)
if #ARGV ~= ARGS_FROM - 1 + 2 * n_fields then
  fail('INVALID', 'expected ' .. n_fields .. ' field pairs')
end
if redis.call('HGET', k_meta, 'inc') ~= a_incarnation then
  fail('CONFLICT', 'the memory expired and was written again since merge ' .. reservation
    .. ' began: merge again')
end
local reservations = seg_read(k_ixseg, 'R')
local now = now_ms()
local mine = nil
for i, r in ipairs(reservations) do
  if tonumber(r[1]) == reservation and tonumber(r[2]) >= now then
    mine = i
  end
end
if not mine then
  fail('CONFLICT', 'merge ' .. reservation .. ' ran out of time or is not open')
end
local r = reservations[mine]
local shape = {sign = tonumber(r[7]), buckets = tonumber(r[11]), blocks = tonumber(r[12])}
local fields, bytes = seg_fields(ARGV, ARGS_FROM, n_fields, {[''] = shape})
local new = #fields
for _, f in ipairs(fields) do
  new = new - redis.call('HEXISTS', k_ixseg, reservation .. f[2])
end
local declared = tonumber(r[4])
if tonumber(r[5]) + new > declared then
  fail('INVALID', 'more fields than the ' .. declared .. ' declared')
end
local written = tonumber(r[5]) + seg_write(k_ixseg, fields, {[''] = reservation})
r[2], r[5], r[6] = now + MERGE_LEASE_MS, written, tonumber(r[6]) + bytes
redis.call('HSET', k_ixseg, 'R', seg_format(reservations))
ttl_follow(k_meta, {k_ixseg}, ttl_ms)
return {written, declared}
