#!lua
-- expire.lua: set or remove the TTL of every key of a memory.
-- USES: args
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms
--   ttl_ms  the new TTL; 0 removes the TTL (PERSIST)
-- REPLY: existing
-- The number of keys of the instance that exist. The lock keeps its own lease.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
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
