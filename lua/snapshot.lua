#!lua flags=no-writes
-- snapshot.lua: what a flush plans from, in one consistent read, bounded.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] summaries
-- ARGV[1] limit   read at most this many of the oldest live messages; 0 = all of them
-- Returns {epoch, last_id, tokens, summary_tokens, count, n_priorities, priority, tokens, ...,
--          n_summaries, summary..., envelope...}: totals from meta (so they cover messages
--          past the limit), per-priority token totals, then summaries and the oldest live
--          messages, each oldest first.
local limit = int_arg(ARGV[1], 'limit', 0, nil)
local meta = redis.call('HGETALL', KEYS[2])
local fields = {}
for i = 1, #meta, 2 do
  fields[meta[i]] = meta[i + 1]
end
local out = {tonumber(fields['epoch']) or 0, tonumber(fields['last_id']) or 0,
  tonumber(fields['tokens']) or 0, tonumber(fields['summary_tokens']) or 0,
  tonumber(fields['count']) or 0}
local priorities = {}
for name, value in pairs(fields) do
  local priority = string.match(name, '^p:(%d+):tokens$')
  if priority and tonumber(value) ~= 0 then
    priorities[#priorities + 1] = tonumber(priority)
    priorities[#priorities + 1] = tonumber(value)
  end
end
out[#out + 1] = #priorities / 2
for i = 1, #priorities do
  out[#out + 1] = priorities[i]
end
local summaries = redis.call('LRANGE', KEYS[3], 0, -1)
out[#out + 1] = #summaries
for i = 1, #summaries do
  out[#out + 1] = summaries[i]
end
local envelopes = redis.call('LRANGE', KEYS[1], 0, limit - 1)
for i = 1, #envelopes do
  out[#out + 1] = envelopes[i]
end
return out
