#!lua
-- trim.lua: move chosen messages among the oldest to the archive, if still where the caller
-- saw them.
-- USES: archive args batch envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixpost ixdocs facts factord
-- ARGV: ttl_ms archive_max prefix_len n_remove ids...
--   ttl_ms       TTL set on every key; 0 leaves TTLs alone
--   archive_max  the archive keeps at most this many originals; 0 = no cap
--   prefix_len   P: how many of the oldest live messages the caller read
--   n_remove     R: how many of those to remove
--   ids          the P ids as the caller read them, then the R ids to remove (among those P,
--                none pinned), then R index terms, one per id to remove, in the same order
-- Returns: {removed_count, removed_tokens, total_tokens, total_count}
-- Errors (nothing written): COMPOZY_MOVED when the messages moved since they were read
-- (read again and retry); COMPOZY_INVALID.
-- The client chooses what to remove (the oldest messages that are not pinned, until the
-- limits hold) because only it can analyse their text for the archive's index.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local prefix_len = int_arg(a_prefix_len, 'prefix_len', 0, nil)
local n_remove = int_arg(a_n_remove, 'n_remove', 0, prefix_len)
local ids = ARGS_FROM - 1
if #ARGV ~= ids + prefix_len + 2 * n_remove then
  fail('INVALID', 'expected ' .. (ids + prefix_len + 2 * n_remove) .. ' arguments, got '
    .. #ARGV)
end
local prefix, heads = checked_prefix(k_msgs, ARGV, ids, prefix_len)
local remove = {}
for i = 1, n_remove do
  remove[ARGV[ids + prefix_len + i]] = ARGV[ids + prefix_len + n_remove + i]
end
local deltas = new_deltas()
local kept, removed, terms, removed_tokens = split_prefix(prefix, heads, remove, deltas, false)

if #removed > 0 then
  rewrite_head(k_msgs, prefix_len, kept)
  archive(K, removed, terms, archive_max)
  deltas.trimmed = #removed
end
local values = apply_deltas(k_meta, deltas)
apply_ttl(KEYS, ttl_ms)
return {#removed, removed_tokens, values.tokens, values.count}
