#!lua
-- lock_acquire.lua: take the flush lock of a memory and get a fencing epoch.
-- KEYS[1] lock  KEYS[2] meta
-- ARGV[1] token   a random owner token, unique to this acquisition
-- ARGV[2] ttl_ms  the lease
-- Returns the new fencing epoch (meta 'epoch', incremented) if the lock was free, else 0.
-- A retry whose first attempt took the lock (its reply lost) finds its own token, and gets
-- the epoch that attempt made.
-- Every acquisition gets a larger epoch, so a commit carrying an older one can be refused.
local ttl_ms = int_arg(ARGV[2], 'ttl_ms', 1, nil)
if string.len(ARGV[1]) < 16 then
  fail('INVALID', 'the lock token must be at least 16 characters')
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ttl_ms) then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    return tonumber(redis.call('HGET', KEYS[2], 'epoch'))
  end
  return 0
end
return redis.call('HINCRBY', KEYS[2], 'epoch', 1)
