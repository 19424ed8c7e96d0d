#!lua flags=no-writes
-- snapshot.lua: what a flush plans from, in one consistent read, bounded.
-- USES: args envelope meta
-- KEYS: msgs meta archive summaries ixdocs ixgone
-- ARGV: limit
--   limit  read the oldest live messages until this many that are not pinned (priority 0)
--          are in hand, 1..MOVE_STEP, scanning at most limit + MAX_PINNED of them
-- REPLY: {epoch last_id tokens summary_tokens count incarnation version ix_next priorities[2] summaries[] envelope...}
-- Totals come from meta (so they cover messages past the limit); priorities are (priority,
-- tokens) pairs; then the summaries and the oldest live messages, each oldest first. A flush
-- may archive only messages below ix_next (indexed).
-- Errors: COMPOZY_INVALID, COMPOZY_FORMAT, COMPOZY_EVICTED
local limit = int_arg(a_limit, 'limit', 1, MOVE_STEP)
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'})
local meta = redis.call('HGETALL', k_meta)  -- sized by guarded
local fields = {}
for i = 1, #meta, 2 do
  fields[meta[i]] = meta[i + 1]
end
local out = {tonumber(fields['epoch']) or 0, tonumber(fields['last_id']) or 0,
  tonumber(fields['tokens']) or 0, tonumber(fields['summary_tokens']) or 0,
  tonumber(fields['count']) or 0, fields['inc'] or '', version_of(fields),
  tonumber(fields['ix_next']) or 0}
local priorities = {}
for name, value in pairs(fields) do
  local priority = string.match(name, '^p:(%d+):tokens$')
  if priority and tonumber(value) ~= 0 then
    priorities[#priorities + 1] = tonumber(priority)
    priorities[#priorities + 1] = tonumber(value)
  end
end
out[#out + 1] = #priorities / 2
for i = 1, #priorities do
  out[#out + 1] = priorities[i]
end
local summaries = summaries_read(K)
out[#out + 1] = #summaries
for i = 1, #summaries do
  out[#out + 1] = summaries[i]
end
-- Pinned messages never move, so they must not use up the bound: a memory that starts with
-- many of them still shows a flush what it may remove.
local chunk = envelopes_read(k_msgs, 'a message', 0, limit + MAX_PINNED - 1,
  tonumber(m.count) or 0)
local movable = 0
for i = 1, #chunk do
  out[#out + 1] = chunk[i]
  local _, _, priority = envelope_head(chunk[i])
  if priority ~= 0 then
    movable = movable + 1
    if movable == limit then
      break
    end
  end
end
return out
