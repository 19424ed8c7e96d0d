#!lua
-- promote.lua: bring archived messages back into context (the recall tools).
-- USES: archive args envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixpost ixdocs facts factord
-- ARGV: ttl_ms max_tokens ids...
--   ttl_ms      TTL set on every key; 0 leaves TTLs alone
--   max_tokens  recalled messages keep at most this many tokens: the oldest recalled leave
--               first; 0 = no cap
--   ids         archived message ids to bring back; unknown ids and ids already recalled
--               are skipped
-- Returns: {n, envelope...}: the n messages brought back now, in the order asked.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local max_tokens = int_arg(a_max_tokens, 'max_tokens', 0, nil)
local wanted = {}
for i = ARGS_FROM, #ARGV do
  wanted[#wanted + 1] = int_arg(ARGV[i], 'id', 1, nil)
end
local present = {}
local recalled = redis.call('LRANGE', k_recalled, 0, -1)
local total = 0
for i = 1, #recalled do
  local id, t = envelope_head(recalled[i])
  present[id] = true
  total = total + t
end
local out = {0}
for _, id in ipairs(wanted) do
  if not present[id] then
    local env = archived_by_id(K, id)
    if env then
      present[id] = true
      redis.call('RPUSH', k_recalled, env)
      local _, t = envelope_head(env)
      total = total + t
      out[#out + 1] = env
    end
  end
end
out[1] = #out - 1
while max_tokens > 0 and total > max_tokens do
  local oldest = redis.call('LPOP', k_recalled)
  if not oldest then
    break
  end
  local _, t = envelope_head(oldest)
  total = total - t
end
apply_ttl(KEYS, ttl_ms)
return out
