#!lua
-- result_put.lua: store a result by its SHA-256 (content-addressed), optionally pinning it.
-- USES: args
-- KEYS: result
-- ARGV: ttl_ms pin pin_ttl_ms size enc kind data
--   ttl_ms      TTL of the result while nothing pins it; 0: none
--   pin         1: one more message points at it (refs + 1); 0: no
--   pin_ttl_ms  while pinned, the result lives at least this long (the pinning memory's TTL,
--               so a pin whose message was never written, or whose memory expired, ends
--               with the memory); 0: no TTL while pinned
--   size        bytes of the original payload
--   enc         'raw' or 'gzip': how data is stored
--   kind        what the payload is ('text', 'json', 'bytes'...), at most 64 bytes
--   data        the payload as stored
-- REPLY: {refs created}
-- The result's reference count now, and 1 if the key was new.
-- The key is a HASH: data, enc, size, kind, ttl (the unpinned TTL), refs. A put of a result
-- that exists writes its fields again (the same bytes, by its name), which also repairs a
-- damaged copy.
-- Errors: COMPOZY_INVALID
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local pin = int_arg(a_pin, 'pin', 0, 1)
local pin_ttl_ms = int_arg(a_pin_ttl_ms, 'pin_ttl_ms', 0, nil)
local size = int_arg(a_size, 'size', 0, MAX_RESULT_BYTES)
if #a_data > MAX_RESULT_BYTES then
  fail('INVALID', 'a stored result has at most ' .. MAX_RESULT_BYTES .. ' bytes')
end
if a_enc ~= 'raw' and a_enc ~= 'gzip' then
  fail('INVALID', "enc is 'raw' or 'gzip'")
end
if #a_kind == 0 or #a_kind > 64 then
  fail('INVALID', 'kind has 1 to 64 bytes')
end
local created = redis.call('EXISTS', k_result) == 0
redis.call('HSET', k_result, 'data', a_data, 'enc', a_enc, 'size', size, 'kind', a_kind,
  'ttl', ttl_ms)
local refs = redis.call('HINCRBY', k_result, 'refs', pin)
if refs > 0 then
  local left = redis.call('PTTL', k_result)
  if pin_ttl_ms == 0 then
    redis.call('PERSIST', k_result)
  elseif created or (left >= 0 and left < pin_ttl_ms) then
    redis.call('PEXPIRE', k_result, pin_ttl_ms)
  end
elseif ttl_ms > 0 then
  redis.call('PEXPIRE', k_result, ttl_ms)
else
  redis.call('PERSIST', k_result)
end
return {refs, created and 1 or 0}
