#!lua
-- clear.lua: remove a memory's messages, summaries and archive.
-- KEYS[1] msgs  KEYS[2] meta  KEYS[3] archive  KEYS[4] summaries  KEYS[5] dedupe
-- ARGV[1] ttl_ms  TTL for the meta key that remains; 0 leaves it without one
-- Returns the number of live messages removed.
-- meta keeps last_id and epoch, so ids stay monotonic and a fencing epoch never goes back.
local ttl_ms = int_arg(ARGV[1], 'ttl_ms', 0, nil)
local _, count = totals(KEYS[2])
local kept = redis.call('HMGET', KEYS[2], 'last_id', 'epoch')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if kept[1] then
  redis.call('HSET', KEYS[2], 'last_id', kept[1])
end
if kept[2] then
  redis.call('HSET', KEYS[2], 'epoch', kept[2])
end
apply_ttl(ttl_ms)
return count
