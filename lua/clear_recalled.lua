#!lua
-- clear_recalled.lua: send every recalled message back to the archive (they never left it).
-- USES: args deltas
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms
--   ttl_ms  TTL set on every key; 0 leaves TTLs alone
-- REPLY: n
-- How many recalled messages there were.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local n = redis.call('LLEN', k_recalled)
redis.call('DEL', k_recalled)
apply_ttl(k_meta, KEYS, ttl_ms)
return n
