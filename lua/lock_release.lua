#!lua
-- lock_release.lua: give the lock up, only for its owner.
-- KEYS[1] lock
-- ARGV[1] token   the owner token given at acquisition
-- Returns 1 if the caller owned the lock and released it, else 0 (it had expired or moved on).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
