#!lua
-- result_touch.lua: keep a pinned result alive as long as the memory that pins it.
-- USES: args
-- KEYS: result
-- ARGV: ttl_ms
--   ttl_ms  the pinning memory's TTL, which its writes keep renewing: a pinned result whose
--           TTL is shorter gets this one again
-- REPLY: ttl
-- The result's TTL in ms after the call (-1: none; -2: no such result, or it expired).
-- A result no message pins (refs 0) lives by its own TTL and is left alone.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 1, nil)
if (tonumber(redis.call('HGET', k_result, 'refs')) or 0) <= 0 then
  return redis.call('PTTL', k_result)
end
local left = redis.call('PTTL', k_result)
if left >= 0 and left < ttl_ms then
  redis.call('PEXPIRE', k_result, ttl_ms)
  return ttl_ms
end
return left
