#!lua
-- expire.lua: set or remove the TTL of every key of a memory.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] archive  KEYS[4] summaries  KEYS[5] dedupe
-- ARGV[1] ttl_ms  the new TTL; 0 removes the TTL (PERSIST)
-- Returns the number of keys of the instance that exist.
local ttl_ms = int_arg(ARGV[1], 'ttl_ms', 0, nil)
local existing = 0
for i = 1, #KEYS do
  if ttl_ms > 0 then
    existing = existing + redis.call('PEXPIRE', KEYS[i], ttl_ms)
  else
    existing = existing + redis.call('EXISTS', KEYS[i])
    redis.call('PERSIST', KEYS[i])
  end
end
return existing
