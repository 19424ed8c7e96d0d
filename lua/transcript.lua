#!lua flags=no-writes
-- transcript.lua: every envelope of a memory, in one consistent read, for an export.
-- USES: args
-- KEYS: msgs archive summaries
-- ARGV: include_archive
--   include_archive  1: the archived originals too; 0: not
-- Returns: {n_msgs, envelope..., n_summaries, envelope..., n_archive, envelope...}, each
--          part oldest first (n_archive is 0 when not asked for).
local include_archive = int_arg(a_include_archive, 'include_archive', 0, 1)
local out = {}
local parts = {k_msgs, k_summaries}
if include_archive == 1 then
  parts[3] = k_archive
end
for i = 1, 3 do
  local items = {}
  if parts[i] then
    items = redis.call('LRANGE', parts[i], 0, -1)
  end
  out[#out + 1] = #items
  for j = 1, #items do
    out[#out + 1] = items[j]
  end
end
return out
