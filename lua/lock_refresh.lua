#!lua
-- lock_refresh.lua: extend the lease, only for its owner.
-- KEYS[1] lock
-- ARGV[1] token   the owner token given at acquisition
-- ARGV[2] ttl_ms  the new lease
-- Returns 1 if the caller still owned the lock and the lease was extended, else 0.
local ttl_ms = int_arg(ARGV[2], 'ttl_ms', 1, nil)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ttl_ms)
return 1
