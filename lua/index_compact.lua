#!lua
-- index_compact.lua: one bounded step of compaction: rewrite the postings blocks one HSCAN
-- call returns without the postings of removed documents.
-- USES: args deltas index meta
-- KEYS: meta ixpost ixdocs
-- ARGV: ttl_ms
--   ttl_ms  the memory's TTL: the keys written get its deadline (lib/deltas.lua:
--           ttl_follow); 0 leaves TTLs alone
-- REPLY: {removed dead_postings postings done}
--   removed  postings this step took out; dead_postings, postings: meta's counts after it
--   done     1 when this step ended a sweep over the whole index
-- meta's ix_sweep holds the HSCAN cursor between steps. Compaction changes no score: readers
-- skip a removed document's postings (its record says so) until they are gone.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local m = meta_read(k_meta, {'fmt', 'ix_sweep', 'ix_maxdead', 'ix_dead', 'ix_postings'})
check_format(m)
if (tonumber(m.fmt) or 1) < DATA_FORMAT then
  return {0, 0, 0, 1}
end
local cursor, removed = compact_step(K, m.ix_sweep or '0', tonumber(m.ix_maxdead) or 0)
local dead = math.max(0, (tonumber(m.ix_dead) or 0) - removed)
local postings = math.max(0, (tonumber(m.ix_postings) or 0) - removed)
local done = cursor == '0'
if done then
  redis.call('HDEL', k_meta, 'ix_sweep')
  if removed == 0 then
    dead = 0  -- a whole sweep found none: the count had gone ahead of the blocks
  end
else
  redis.call('HSET', k_meta, 'ix_sweep', cursor)
end
redis.call('HSET', k_meta, 'ix_dead', dead, 'ix_postings', postings)
ttl_follow(k_meta, {k_ixpost, k_ixdocs}, ttl_ms)
return {removed, dead, postings, done and 1 or 0}
