#!lua
-- facts_delete.lua: remove session facts by key.
-- USES: args deltas meta
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms keys...
--   ttl_ms  TTL set on every key of the memory; 0 leaves TTLs alone
--   keys    the fact keys to remove (at most MAX_FACTS_PER_CALL); unknown ones are skipped
-- REPLY: removed
-- The number of facts removed.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
if #ARGV - ARGS_FROM + 1 > MAX_FACTS_PER_CALL then
  fail('INVALID', 'at most ' .. MAX_FACTS_PER_CALL .. ' facts go in one call')
end
check_facts(k_facts, k_factord)
local removed = 0
for i = ARGS_FROM, #ARGV do
  removed = removed + redis.call('HDEL', k_facts, ARGV[i])
  redis.call('ZREM', k_factord, ARGV[i])
end
apply_ttl(k_meta, KEYS, ttl_ms)
return removed
