#!lua
-- purge.lua: delete every key of a memory, meta and the lock included (the CLI's purge).
-- USES: (none)
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins lock legacy_ixpost legacy_ixdocs legacy_ixp
-- ARGV: (none)
-- REPLY: {keys items}
--   keys   how many of the memory's keys there were
--   items  the elements they held: list entries, hash fields, sorted-set members (a key of
--          another type than compozy-memory gives it counts none)
-- Keys are removed with UNLINK: the server frees a large one in the background, so a purge of
-- any size holds it about as long as one of an empty memory. Through this function a
-- read-write ACL user purges with the commands the other scripts use (lua/clear.lua); the
-- project's session index is a key of another slot, left to sessions_forget.lua.
local sizes = {LLEN = {k_msgs, k_archive, k_summaries, k_recalled, k_ixgone},
  HLEN = {k_meta, k_ixseg, k_ixdocs, k_ixvec, k_facts, k_respins, k_legacy_ixdocs, k_legacy_ixp},
  ZCARD = {k_dedupe, k_factord, k_legacy_ixpost}}
local items = 0
for command, keys in pairs(sizes) do
  for _, key in ipairs(keys) do
    local n = redis.pcall(command, key)
    if type(n) == 'number' then
      items = items + n
    end
  end
end
local found = redis.call('EXISTS', unpack(KEYS))
redis.call('UNLINK', unpack(KEYS))
return {found, items}
