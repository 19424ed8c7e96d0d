#!lua flags=no-writes
-- read.lua: live messages by index, with the totals, in one consistent read.
-- USES: args meta
-- KEYS: msgs meta
-- ARGV: start stop
--   start, stop  LRANGE indices (negative count from the newest)
-- Returns: {total_tokens, total_count, last_id, envelope, ...} envelopes oldest first.
-- (The newest messages within a budget come from context.lua, which keeps pinned ones.)
local start = int_arg(a_start, 'start', -2 ^ 52, 2 ^ 52)
local stop = int_arg(a_stop, 'stop', -2 ^ 52, 2 ^ 52)
local tokens, count, last_id = totals(k_meta)
local out = {tokens, count, last_id}
local envelopes = redis.call('LRANGE', k_msgs, start, stop)
for i = 1, #envelopes do
  out[#out + 1] = envelopes[i]
end
return out
