#!lua flags=no-writes
-- health.lua: the totals and sizes of a memory in one consistent read.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] archive  KEYS[4] summaries  KEYS[5] dedupe
-- ARGV    none
-- Returns a flat list of field, value pairs: every field of meta (tokens, count, last_id,
-- p:<priority>:tokens, p:<priority>:count, archived, ...) then '_msgs_len', '_archive_len',
-- '_summaries_len' and '_ttl_ms' (the msgs key's PTTL: -1 none, -2 no such key).
local out = redis.call('HGETALL', KEYS[2])
out[#out + 1] = '_msgs_len'
out[#out + 1] = redis.call('LLEN', KEYS[1])
out[#out + 1] = '_archive_len'
out[#out + 1] = redis.call('LLEN', KEYS[3])
out[#out + 1] = '_summaries_len'
out[#out + 1] = redis.call('LLEN', KEYS[4])
out[#out + 1] = '_ttl_ms'
out[#out + 1] = redis.call('PTTL', KEYS[2])
return out
