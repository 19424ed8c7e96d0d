#!lua
-- facts_set.lua: set one or many session facts (the kernel layer), capped, oldest out first.
-- USES: args deltas meta
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms cap n facts...
--   ttl_ms  TTL set on every key of the memory; 0 leaves TTLs alone
--   cap     the most facts kept, 1..MAX_FACTS: past it the least recently set go
--   n       number of facts, 1..MAX_FACTS_PER_CALL
--   facts   n triples: key, tokens, value. tokens is what the fact's line ('- key: value')
--           counts with the memory's counter, so context.lua can budget facts without a
--           tokenizer. A key set again takes its new value and moves to the newest end.
-- REPLY: {count evicted...}
-- The number of facts kept, then the keys the cap removed.
-- Storage: facts HASH key -> 'tokens<TAB>value'; factord ZSET key scored by meta's
-- 'facts_seq' when it was last set (ZPOPMIN finds the oldest in O(log n), and moving a key
-- to the end is one ZADD, where a LIST would need an O(n) LREM).
-- Errors (nothing written): COMPOZY_INVALID
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local cap = int_arg(a_cap, 'cap', 1, MAX_FACTS)
local n = int_arg(a_n, 'n', 1, MAX_FACTS_PER_CALL)
if #ARGV ~= ARGS_FROM - 1 + 3 * n then
  fail('INVALID', 'expected ' .. n .. ' fact triples, got ' .. (#ARGV - ARGS_FROM + 1)
    .. ' arguments')
end
for i = 1, n do
  local at = ARGS_FROM + 3 * (i - 1)
  local key, value = ARGV[at], ARGV[at + 2]
  if #key == 0 or #key > MAX_FACT_KEY then
    fail('INVALID', 'fact ' .. i .. ': a key has 1 to ' .. MAX_FACT_KEY .. ' bytes')
  end
  if #value > MAX_FACT_VALUE then
    fail('INVALID', 'fact ' .. i .. ': a value has at most ' .. MAX_FACT_VALUE .. ' bytes')
  end
  int_arg(ARGV[at + 1], 'fact ' .. i .. ' tokens', 0, MAX_MESSAGE_TOKENS)
end
check_facts(k_facts, k_factord)
incarnation(k_meta)
local seq = redis.call('HINCRBY', k_meta, 'facts_seq', n) - n
for i = 1, n do
  local at = ARGS_FROM + 3 * (i - 1)
  seq = seq + 1
  redis.call('HSET', k_facts, ARGV[at], ARGV[at + 1] .. '\t' .. ARGV[at + 2])
  redis.call('ZADD', k_factord, seq, ARGV[at])
end
local out = {0}
local over = redis.call('ZCARD', k_factord) - cap
if over > 0 then
  local popped = redis.call('ZPOPMIN', k_factord, over)
  for i = 1, #popped, 2 do
    redis.call('HDEL', k_facts, popped[i])
    out[#out + 1] = popped[i]
  end
end
out[1] = redis.call('ZCARD', k_factord)
apply_ttl(k_meta, KEYS, ttl_ms)
return out
