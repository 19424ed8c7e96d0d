#!lua flags=no-writes
-- facts_items.lua: every session fact, oldest set first, in one consistent read.
-- USES: meta
-- KEYS: facts factord
-- ARGV: (none)
-- REPLY: {facts...}
-- A flat list of key, 'tokens<TAB>value' pairs, least recently set first.
check_facts(k_facts, k_factord, true)
local order = redis.call('ZRANGE', k_factord, -MAX_FACTS, -1)
if #order == 0 then
  return {}
end
local values = redis.call('HMGET', k_facts, unpack(order))
local out = {}
for i = 1, #order do
  if values[i] then
    out[#out + 1] = order[i]
    out[#out + 1] = values[i]
  end
end
return out
