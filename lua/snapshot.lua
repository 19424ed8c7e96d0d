#!lua flags=no-writes
-- snapshot.lua: everything a flush plans from, in one consistent read.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] summaries
-- ARGV    none
-- Returns {epoch, last_id, tokens, summary_tokens, n_summaries, summary..., envelope...}
-- summaries then live messages, each oldest first.
local meta = redis.call('HMGET', KEYS[2], 'epoch', 'last_id', 'tokens', 'summary_tokens')
local summaries = redis.call('LRANGE', KEYS[3], 0, -1)
local out = {tonumber(meta[1]) or 0, tonumber(meta[2]) or 0, tonumber(meta[3]) or 0,
  tonumber(meta[4]) or 0, #summaries}
for i = 1, #summaries do
  out[#out + 1] = summaries[i]
end
local envelopes = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #envelopes do
  out[#out + 1] = envelopes[i]
end
return out
