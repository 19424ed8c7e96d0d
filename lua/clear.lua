#!lua
-- clear.lua: remove a memory's messages, summaries, archive (and its index), recalled
-- messages, session facts and dedupe keys.
-- KEYS: msgs meta archive summaries dedupe recalled ixpost ixdocs facts factord
-- ARGV: ttl_ms
--   ttl_ms  TTL for the meta key that remains; 0 leaves it without one
-- Returns: the number of live messages removed.
-- meta keeps last_id, epoch and the incarnation, so ids stay monotonic, a fencing epoch never
-- goes back, and a compare-and-set taken before the clear still names this memory.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local _, count = totals(k_meta)
local kept = redis.call('HMGET', k_meta, 'last_id', 'epoch', 'inc')
redis.call('DEL', k_msgs, k_meta, k_archive, k_summaries, k_dedupe, k_recalled, k_ixpost,
  k_ixdocs, k_facts, k_factord)
local restore = {}
for i, field in ipairs({'last_id', 'epoch', 'inc'}) do
  if kept[i] then
    restore[#restore + 1] = field
    restore[#restore + 1] = kept[i]
  end
end
if #restore > 0 then
  redis.call('HSET', k_meta, unpack(restore))
end
apply_ttl(KEYS, ttl_ms)
return count
