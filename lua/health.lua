#!lua flags=no-writes
-- health.lua: the totals and sizes of a memory in one consistent read.
-- USES: (none)
-- KEYS: msgs meta archive summaries recalled
-- ARGV: (none)
-- Returns: a flat list of field, value pairs: every field of meta (tokens, count, last_id,
-- p:<priority>:tokens, p:<priority>:count, archived, inc, ...) then '_msgs_len',
-- '_archive_len', '_summaries_len', '_recalled_len' and '_ttl_ms' (meta's PTTL: -1 none, -2 no such key).
-- (not the processes' dedupe lists, 'w:<process>': bookkeeping, and long)
local out = {}
local meta = redis.call('HGETALL', k_meta)
for i = 1, #meta, 2 do
  if string.sub(meta[i], 1, 2) ~= 'w:' then
    out[#out + 1] = meta[i]
    out[#out + 1] = meta[i + 1]
  end
end
out[#out + 1] = '_msgs_len'
out[#out + 1] = redis.call('LLEN', k_msgs)
out[#out + 1] = '_archive_len'
out[#out + 1] = redis.call('LLEN', k_archive)
out[#out + 1] = '_summaries_len'
out[#out + 1] = redis.call('LLEN', k_summaries)
out[#out + 1] = '_recalled_len'
out[#out + 1] = redis.call('LLEN', k_recalled)
out[#out + 1] = '_ttl_ms'
out[#out + 1] = redis.call('PTTL', k_meta)
return out
