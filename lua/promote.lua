#!lua
-- promote.lua: bring messages back into context by id (the recall tools): archived ones, or
-- live ones the window no longer reaches.
-- USES: args deltas docs envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms max_tokens ids...
--   ttl_ms      TTL set on every key; 0 leaves TTLs alone
--   max_tokens  recalled messages keep at most this many tokens: the oldest recalled leave
--               first; 0 = no token cap (the count cap, MAX_RECALLED, always holds)
--   ids         at most MAX_RECALL_IDS message ids to bring back; ids not indexed (unknown,
--               pinned, not indexed yet) and ids already recalled are skipped
-- REPLY: {n envelope...}
-- The n messages brought back now, in the order asked.
-- Errors: COMPOZY_INVALID, COMPOZY_FORMAT, COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local max_tokens = int_arg(a_max_tokens, 'max_tokens', 0, nil)
if #ARGV - ARGS_FROM + 1 > MAX_RECALL_IDS then
  fail('INVALID', 'at most ' .. MAX_RECALL_IDS .. ' ids go in one recall')
end
local wanted = {}
for i = ARGS_FROM, #ARGV do
  wanted[#wanted + 1] = int_arg(ARGV[i], 'id', 1, 2 ^ 52)
end
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'}, nil, true)
local present = {}
local held = redis.call('LLEN', k_recalled)
if held > MAX_RECALLED then
  fail('CORRUPT', 'the memory holds ' .. held .. ' recalled messages, more than the '
    .. MAX_RECALLED .. ' compozy-memory keeps: they were written raw')
end
local recalled = envelopes_read(k_recalled, 'a recalled message', 0, -1, held)
local total = 0
for i = 1, #recalled do
  local id, t = envelope_head(recalled[i])
  present[id] = true
  total = total + t
end
local docs = doc_reader(k_ixdocs)
local state = {count = tonumber(m.count) or 0, archive_base = tonumber(m.archive_base) or 0}
local out = {0}
local n = #recalled
-- Every message is found, sized and its head read before the first write.
local tokens = {}
for _, id in ipairs(wanted) do
  if not present[id] then
    local env = locate(K, docs, id, state)
    if env then
      present[id] = true
      out[#out + 1] = env
      local _, t = envelope_head(env)
      tokens[#out] = t
    end
  end
end
for i = 2, #out do
  redis.call('RPUSH', k_recalled, out[i])
  total = total + tokens[i]
  n = n + 1
end
out[1] = #out - 1
while n > MAX_RECALLED or (max_tokens > 0 and total > max_tokens) do
  local oldest = redis.call('LPOP', k_recalled)
  if not oldest then
    break
  end
  local _, t = envelope_head(oldest)
  total = total - t
  n = n - 1
end
apply_ttl(k_meta, KEYS, ttl_ms)
return out
