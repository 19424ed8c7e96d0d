#!lua
-- lock_refresh.lua: extend the lease, only for its owner.
-- USES: args
-- KEYS: lock
-- ARGV: token lease_ms
--   token     the owner token given at acquisition
--   lease_ms  the new lease
-- REPLY: owned
-- 1 if the caller still owned the lock and the lease was extended, else 0.
local lease_ms = int_arg(a_lease_ms, 'lease_ms', 1, nil)
local size = redis.pcall('STRLEN', k_lock)  -- a longer lock than a token was written raw
if (type(size) == 'number' and size > 128) or redis.call('GET', k_lock) ~= a_token then
  return 0
end
redis.call('PEXPIRE', k_lock, lease_ms)
return 1
