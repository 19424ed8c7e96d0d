#!lua flags=no-writes
-- snapshot.lua: what a flush plans from, in one consistent read, bounded.
-- USES: args envelope
-- KEYS: msgs meta summaries
-- ARGV: limit
--   limit  read the oldest live messages until this many that are not pinned (priority 0)
--          are in hand, scanning at most 16 times as many; 0 = all of them
-- Returns: {epoch, last_id, tokens, summary_tokens, count, incarnation, n_priorities,
--          priority, tokens, ..., n_summaries, summary..., envelope...}: totals from meta (so
--          they cover messages past the limit), per-priority token totals, then summaries and
--          the oldest live messages, each oldest first.
local limit = int_arg(a_limit, 'limit', 0, nil)
local meta = redis.call('HGETALL', k_meta)
local fields = {}
for i = 1, #meta, 2 do
  fields[meta[i]] = meta[i + 1]
end
local out = {tonumber(fields['epoch']) or 0, tonumber(fields['last_id']) or 0,
  tonumber(fields['tokens']) or 0, tonumber(fields['summary_tokens']) or 0,
  tonumber(fields['count']) or 0, fields['inc'] or ''}
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
local summaries = redis.call('LRANGE', k_summaries, 0, -1)
out[#out + 1] = #summaries
for i = 1, #summaries do
  out[#out + 1] = summaries[i]
end
-- Pinned messages never move, so they must not use up the bound: a memory that starts with
-- hundreds of them still shows a flush what it may remove.
if limit == 0 then
  local envelopes = redis.call('LRANGE', k_msgs, 0, -1)
  for i = 1, #envelopes do
    out[#out + 1] = envelopes[i]
  end
  return out
end
local scanned, movable, cap = 0, 0, limit * 16
while movable < limit and scanned < cap do
  local chunk = redis.call('LRANGE', k_msgs, scanned, scanned + math.min(256, cap - scanned) - 1)
  if #chunk == 0 then
    break
  end
  for i = 1, #chunk do
    out[#out + 1] = chunk[i]
    scanned = scanned + 1
    local _, _, priority = envelope_head(chunk[i])
    if priority ~= 0 then
      movable = movable + 1
      if movable == limit then
        break
      end
    end
  end
end
return out
