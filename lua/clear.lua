#!lua
-- clear.lua: remove a memory's messages, summaries, archive (and its index), recalled
-- messages, session facts and dedupe keys.
-- USES: args meta
-- KEYS: msgs meta archive summaries dedupe recalled ixpost ixdocs facts factord
-- ARGV: ttl_ms
--   ttl_ms  TTL for the meta key that remains; 0 leaves it without one
-- Returns: {removed, envelope...}: the number of live messages removed, and, when the memory
--          ever pinned stored results (meta 'pinned'), the live and archived envelopes that
--          refer to one, for the client to release.
-- meta keeps last_id, epoch and the incarnation, so ids stay monotonic, a fencing epoch never
-- goes back, and a compare-and-set taken before the clear still names this memory.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local _, count = totals(k_meta)
local out = {count}
if (tonumber(redis.call('HGET', k_meta, 'pinned')) or 0) > 0 then
  for _, key in ipairs({k_msgs, k_archive}) do
    for _, env in ipairs(redis.call('LRANGE', key, 0, -1)) do
      if string.find(env, '"result_ref"', 1, true) then
        out[#out + 1] = env
      end
    end
  end
end
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
return out
