#!lua
-- lock_acquire.lua: take the flush lock of a memory and get a fencing epoch.
-- USES: args deltas meta
-- KEYS: msgs meta archive summaries ixdocs facts lock
-- ARGV: token lease_ms ttl_ms
--   token     a random owner token, unique to this acquisition (at least 16 characters)
--   lease_ms  how long the lock is held unless refreshed
--   ttl_ms    the memory's TTL, set on meta if this creates it; 0 = none
-- REPLY: {epoch incarnation}
-- The new fencing epoch (meta 'epoch', incremented) if the
-- lock was free, else {0, incarnation}. A retry whose first attempt took the lock (its reply
-- lost) finds its own token, and gets the epoch that attempt made.
-- Every acquisition gets a larger epoch, and every flush commit names the epoch and the
-- incarnation it planned under, so a commit from an older holder, or from before the memory
-- expired, is refused. The incarnation is checked against the server's replication history
-- first (lib/deltas.lua: lineage): on a promoted replica the memory gets a new one, so a plan
-- made on the old primary cannot commit.
-- Errors (nothing written): COMPOZY_INVALID; COMPOZY_EVICTED when meta is gone but other keys
-- of the memory are not (it is never made again over them).
local lease_ms = int_arg(a_lease_ms, 'lease_ms', 1, nil)
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
if string.len(a_token) < 16 or string.len(a_token) > 128 then
  fail('INVALID', 'the lock token has 16 to 128 characters')
end
local m = meta_read(k_meta, {'inc', 'rid'})
local inc
if m.inc == nil then
  check_parts(m, K, {msgs = {k_msgs}, archive = {k_archive}, summaries = {k_summaries},
    ixdocs = {k_ixdocs}, facts = {k_facts}})
  inc = incarnation(k_meta)
  apply_ttl(k_meta, {k_meta}, ttl_ms)
else
  inc = lineage(k_meta, m)
end
if not redis.call('SET', k_lock, a_token, 'NX', 'PX', lease_ms) then
  -- A token is at most 128 bytes: a longer lock was written raw, and is not read (STRLEN
  -- refused, by an ACL line from before it was needed: read as before).
  local size = redis.pcall('STRLEN', k_lock)
  if (type(size) ~= 'number' or size <= 128) and redis.call('GET', k_lock) == a_token then
    return {tonumber(redis.call('HGET', k_meta, 'epoch')), inc}
  end
  return {0, inc}
end
return {redis.call('HINCRBY', k_meta, 'epoch', 1), inc}
