#!lua flags=no-writes
-- transcript.lua: a page of one part of a memory, for an export, with a stamp that changes
-- whenever the memory does.
-- USES: args envelope meta
-- KEYS: msgs meta archive summaries
-- ARGV: part offset count
--   part    'msgs', 'summaries' or 'archive'
--   offset  the page's first index in that list; count: its length, 1..MAX_READ
-- REPLY: {stamp length envelope...}
--   stamp   meta's version, archived and archive_base: an export whose pages all carry the
--           same stamp read one state of the memory
--   length  the part's length now
-- An export reads page after page, each bounded, and starts again if the stamp changed.
local offset = int_arg(a_offset, 'offset', 0, nil)
local count = int_arg(a_count, 'count', 1, MAX_READ)
local lists = {msgs = k_msgs, summaries = k_summaries, archive = k_archive}
local list = lists[a_part]
if not list then
  fail('INVALID', "part is 'msgs', 'summaries' or 'archive'")
end
local m = guarded(K, {'msgs', 'archive', 'summaries'}, {'ver', 'last_id'})
local out = {version_of(m) .. '|' .. (m.archived or 0) .. '|' .. (m.archive_base or 0),
  redis.call('LLEN', list)}
for _, env in ipairs(envelopes_read(list, 'a stored message', offset, offset + count - 1)) do
  out[#out + 1] = env
end
return out
