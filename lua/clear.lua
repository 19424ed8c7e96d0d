#!lua
-- clear.lua: remove a memory's messages, summaries, archive (and its index and vectors),
-- recalled messages, session facts and dedupe keys.
-- USES: args batch deltas
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins legacy_ixpost legacy_ixdocs legacy_ixp
-- ARGV: ttl_ms
--   ttl_ms  the memory's TTL, for the meta key that remains; 0 keeps the deadline meta had
-- REPLY: {removed pins[2]}
--   removed  the number of live messages removed
--   pins     (result key, pins) pairs: the stored results this memory's messages pinned, for
--            the client to release, each as many times as it was pinned here
-- meta keeps last_id, epoch, the incarnation and the format, so ids stay monotonic, a fencing
-- epoch never goes back, and a compare-and-set taken before the clear still names this
-- memory. Keys are removed with UNLINK: the server frees a large one in the background, so a
-- clear of any size holds it for about as long as a clear of an empty memory. A clear is also
-- the repair of a memory whose keys were partly evicted: it removes what is left.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local kept = redis.call('HMGET', k_meta, 'count', 'last_id', 'epoch', 'inc', 'fmt', 'ix_gen', 'rid')
-- The pins are read only when they are what compozy-memory writes (at most MAX_RESULT_PINS
-- result keys, sized first); a clear is also the repair of a memory planted raw, so one
-- written raw is not read, and its results are left to their TTLs.
local pins = {}
local n_pins = redis.call('HLEN', k_respins)
local used = n_pins > 0 and redis.pcall('MEMORY', 'USAGE', k_respins, 'SAMPLES', 0) or 0
if n_pins <= MAX_RESULT_PINS and (type(used) ~= 'number' or used <= n_pins * 1024 + 16384) then
  pins = redis.call('HGETALL', k_respins)
end
local deadline = redis.call('PEXPIRETIME', k_meta)
redis.call('UNLINK', k_msgs, k_meta, k_archive, k_summaries, k_dedupe, k_recalled, k_ixseg,
  k_ixdocs, k_ixgone, k_ixvec, k_facts, k_factord, k_respins, k_legacy_ixpost, k_legacy_ixdocs,
  k_legacy_ixp)
local last_id = tonumber(kept[2]) or 0
if kept[4] then
  local restore = {'last_id', last_id, 'ix_next', last_id + 1, 'vx_next', last_id + 1,
    'inc', kept[4],
    'fmt', DATA_FORMAT, 'ver', next_version(last_id, '')}
  if kept[3] then
    restore[#restore + 1] = 'epoch'
    restore[#restore + 1] = kept[3]
  end
  if kept[6] then  -- a segment's generation is never given twice in one incarnation
    restore[#restore + 1] = 'ix_gen'
    restore[#restore + 1] = kept[6]
  end
  if kept[7] then  -- the lineage of the incarnation kept (lib/deltas.lua)
    restore[#restore + 1] = 'rid'
    restore[#restore + 1] = kept[7]
  end
  redis.call('HSET', k_meta, unpack(restore))
end
-- meta is the memory's one key now: its deadline is every key's.
if ttl_ms > 0 then
  apply_ttl(k_meta, {k_meta}, ttl_ms)
elseif deadline > 0 then
  redis.call('PEXPIREAT', k_meta, deadline)
end
local out = {tonumber(kept[1]) or 0, #pins / 2}
for i = 1, #pins do
  out[#out + 1] = pins[i]
end
return out
