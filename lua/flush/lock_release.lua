#!lua
-- lock_release.lua: give the lock up, only for its owner.
-- USES: (none)
-- KEYS: lock
-- ARGV: token
--   token  the owner token given at acquisition
-- REPLY: released
-- 1 if the caller owned the lock and released it, else 0 (it had expired or moved on).
local size = redis.pcall('STRLEN', k_lock)  -- a longer lock than a token was written raw
if (type(size) == 'number' and size > 128) or redis.call('GET', k_lock) ~= a_token then
  return 0
end
redis.call('DEL', k_lock)
return 1
