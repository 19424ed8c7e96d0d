#!lua
-- trim.lua: one bounded step of moving the oldest messages to the archive until limits hold.
-- USES: archive args batch deltas envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms archive_max keep_messages max_tokens everything
--   ttl_ms         TTL set on every key; 0 leaves TTLs alone
--   archive_max    the archive keeps at most this many originals; 0 = no cap
--   keep_messages  stop once at most this many live messages remain; -1 = no such limit
--   max_tokens     stop once at most this many live tokens remain; -1 = no such limit
--   everything     1: pinned messages (priority 0) move too (replace drains a long memory so);
--                  0: they never move
-- REPLY: {moved moved_tokens total_tokens total_count status}
--   status  0: done (the limits hold, or only pinned messages are left);
--           1: more to move: call again;
--           2: the next message to move is not indexed yet: run the indexer, then call again
-- One call moves at most MOVE_STEP messages, looking at most MOVE_STEP + MAX_PINNED deep, so
-- a long trim is several calls, each leaving a consistent memory (what was moved is in the
-- archive, with the totals to match): safe to interrupt between any two.
-- Errors (nothing written): COMPOZY_INVALID, COMPOZY_FORMAT, COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local keep = int_arg(a_keep_messages, 'keep_messages', -1, nil)
local max_tokens = int_arg(a_max_tokens, 'max_tokens', -1, nil)
local everything = int_arg(a_everything, 'everything', 0, 1) == 1
local m = guarded(K, {'msgs', 'archive', 'index', 'ixgone'}, {'tokens', 'ix_next', 'last_id',
  'pins'}, true)
local tokens, count = tonumber(m.tokens) or 0, tonumber(m.count) or 0
local ix_next = index_next(m)
local function holds()
  return (keep < 0 or count <= keep) and (max_tokens < 0 or tokens <= max_tokens)
end
if holds() then
  return {0, 0, tokens, count, 0}
end
local prefix = envelopes_read(k_msgs, 'a message', 0, MOVE_STEP + MAX_PINNED - 1, count)
local kept, moved = {}, {}
local deltas = new_deltas()
local moved_tokens, scanned, status = 0, 0, 0
for i = 1, #prefix do
  if holds() then
    break
  end
  local id, t, priority = envelope_head(prefix[i])
  if priority == 0 and not everything then
    kept[#kept + 1] = prefix[i]
  elseif priority ~= 0 and id >= ix_next then
    status = 2
    break
  elseif #moved == MOVE_STEP then
    status = 1
    break
  else
    moved[#moved + 1] = prefix[i]
    account(deltas, -1, t, priority)
    moved_tokens = moved_tokens + t
    tokens, count = tokens - t, count - 1
  end
  scanned = i
end
if status == 0 and not holds() and scanned == #prefix and #prefix < count + #moved then
  status = 1  -- the step looked as deep as it may: more below
end
if #moved > 0 then
  redis.call('LTRIM', k_msgs, scanned, -1)
  for i = #kept, 1, -1 do
    redis.call('LPUSH', k_msgs, kept[i])
  end
  deltas.trimmed = #moved
  local updates = {'ver', next_version(tonumber(m.last_id) or 0, '')}
  if everything and m.pins then
    local pins = m.pins
    for _, env in ipairs(moved) do
      local id, _, priority = envelope_head(env)
      if priority == 0 then
        pins = string.gsub(pins, ',' .. id .. ',', ',', 1)
      end
    end
    updates[3], updates[4] = 'pins', pins
  end
  local values = apply_deltas(k_meta, deltas, nil, function() return updates end)
  archive_push(K, moved, archive_max)
  tokens, count = values.tokens, values.count
end
apply_ttl(k_meta, KEYS, ttl_ms)
return {#moved, moved_tokens, tokens, count, status}
