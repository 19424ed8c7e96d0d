#!lua
-- vec_reset.lua: drop a memory's vectors so the vector step embeds it again with another
-- model (vectors of two models are never compared).
-- USES: args deltas meta
-- KEYS: meta ixvec
-- ARGV: ttl_ms model
--   ttl_ms  the memory's TTL: meta keeps its deadline (lib/deltas.lua: ttl_follow); 0 leaves
--           it alone
--   model   the model the vectors are to be made with from now on
-- REPLY: reset
--   1 if vectors of another model were dropped; 0 if they were of this model already
-- The HASH goes with UNLINK, freed in the background.
-- Errors: COMPOZY_INVALID, COMPOZY_FORMAT
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
if #a_model == 0 or #a_model > MAX_TERM_BYTES then
  fail('INVALID', 'a model name has 1 to ' .. MAX_TERM_BYTES .. ' bytes')
end
local m = meta_read(k_meta, {'inc', 'fmt', 'vx_model'})
check_format(m)
if m.inc == nil or m.vx_model == a_model then
  return 0
end
redis.call('UNLINK', k_ixvec)
redis.call('HSET', k_meta, 'vx_next', 1, 'vx_count', 0, 'vx_model', a_model)
redis.call('HDEL', k_meta, 'vx_bytes', 'vx_names')
ttl_follow(k_meta, {k_meta}, ttl_ms)
return 1
