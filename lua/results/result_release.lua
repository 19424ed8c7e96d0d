#!lua
-- result_release.lua: one message fewer points at a result (refs - 1, never below 0).
-- USES: (none)
-- KEYS: result
-- ARGV: (none)
-- REPLY: refs
-- The reference count now, or -1 if the result does not exist. At 0 the result
-- gets back its unpinned TTL (its 'ttl' field; none: it stays until deleted).
if redis.call('EXISTS', k_result) == 0 then
  return -1
end
local refs = tonumber(redis.call('HGET', k_result, 'refs')) or 0
if refs > 0 then
  refs = redis.call('HINCRBY', k_result, 'refs', -1)
end
if refs == 0 then
  local ttl_ms = tonumber(redis.call('HGET', k_result, 'ttl')) or 0
  if ttl_ms > 0 then
    redis.call('PEXPIRE', k_result, ttl_ms)
  end
end
return refs
