#!lua
-- index_gc.lua: one bounded step of deleting what merges left: the fields of segments merged
-- away, and of merges that ran out of time.
-- USES: args clock deltas segments segments_write
-- KEYS: meta ixseg
-- ARGV: ttl_ms
--   ttl_ms  the memory's TTL: ixseg gets meta's deadline (ttl_follow); 0 leaves it alone
-- REPLY: left
--   left  fields still to delete (0: nothing left; call again otherwise)
-- At most GC_STEP_FIELDS fields a call, each named from its segment's entry (no HSCAN).
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local reservations, garbage = seg_read(k_ixseg, 'R', 'G')
local kept, expired = seg_expire(reservations, now_ms())
if #expired > 0 then
  seg_discard(garbage, expired)  -- (R holds at most MAX_SEGMENTS / 2 merges: no room check)
  if #kept > 0 then
    redis.call('HSET', k_ixseg, 'R', seg_format(kept))
  else
    redis.call('HDEL', k_ixseg, 'R')
  end
end
local left = seg_collect(k_ixseg, garbage, GC_STEP_FIELDS)
ttl_follow(k_meta, {k_ixseg}, ttl_ms)
return left
