#!lua flags=no-writes
-- read.lua: live messages by index, with the totals, in one consistent read, bounded.
-- USES: args envelope meta
-- KEYS: msgs meta
-- ARGV: start stop
--   start, stop  LRANGE indices (negative count from the newest); at most MAX_READ messages
--                are returned, from start
-- REPLY: {total_tokens total_count last_id incarnation version envelope...}
-- Envelopes oldest first. msgs is sized before it is read, and each envelope after:
-- COMPOZY_CORRUPT for what compozy-memory never writes (lib/envelope.lua). (The newest messages within a budget come from context.lua, which
-- keeps pinned ones.)
local start = int_arg(a_start, 'start', -2 ^ 52, 2 ^ 52)
local stop = int_arg(a_stop, 'stop', -2 ^ 52, 2 ^ 52)
local m = guarded(K, {'msgs'}, {'tokens', 'last_id', 'ver'})
local count = tonumber(m.count) or 0
-- The range as LRANGE would take it, then cut to MAX_READ from its start.
local first = start < 0 and math.max(count + start, 0) or start
local last = stop < 0 and count + stop or math.min(stop, count - 1)
last = math.min(last, first + MAX_READ - 1)
local out = {tonumber(m.tokens) or 0, count, tonumber(m.last_id) or 0, m.inc or '',
  version_of(m)}
if last >= first then
  local envelopes = envelopes_read(k_msgs, 'a message', first, last, count)
  for i = 1, #envelopes do
    out[#out + 1] = envelopes[i]
  end
end
return out
