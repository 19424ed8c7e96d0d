#!lua
-- import.lua: one bounded step of writing a transcript's envelopes, with their own ids and
-- times, into a memory that holds none.
-- USES: archive args deltas envelope meta
-- KEYS: msgs meta archive summaries dedupe recalled ixseg ixdocs ixgone ixvec facts factord respins
-- ARGV: ttl_ms archive_max token part at last_id items...
--   ttl_ms       TTL set on every key; 0 leaves TTLs alone
--   archive_max  the archive's cap, as for trim.lua
--   token        names this import (16 to 128 bytes): every step of it passes the same
--   part         'msgs', 'summaries' or 'archive': the list the items go to, in order; or
--                'done': the last step (no items)
--   at           how many of that part's envelopes earlier steps sent: a step repeated
--                (its reply lost) finds its envelopes there and writes nothing again
--   last_id      the transcript's largest id (below MAX_TOTAL; each item's id at least 1)
--   items        at most MAX_BATCH envelopes (MAX_CALL_BYTES in all, MAX_ENVELOPE_BYTES
--                each), each part in its list's order, live ids increasing
-- REPLY: {count last_id}
-- Live messages and the memory's last id after the step.
-- The first step claims the memory (meta's 'imp' holds the token, and last_id becomes the
-- transcript's, so no id is given twice); until the 'done' step, writes other than this
-- import's steps are refused. 'done' hands the memory to the indexer, which builds its index
-- as for a memory of an older format (live messages and summaries, then the archive). An
-- import cut short leaves the memory refusing writes: clear() it and import again.
-- Errors (nothing written): COMPOZY_CONFLICT when the memory holds messages, has given out
-- ids at or past the transcript's first, or another import holds it; COMPOZY_INVALID for an
-- envelope without its id/ts/tokens/priority head or out of order; COMPOZY_FORMAT,
-- COMPOZY_EVICTED
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local last = int_arg(a_last_id, 'last_id', 0, MAX_TOTAL - 1)
local at = int_arg(a_at, 'at', 0, 2 ^ 52)
if #a_token < 16 or #a_token > 128 then
  fail('INVALID', 'an import token has 16 to 128 bytes')
end
local lists = {msgs = k_msgs, summaries = k_summaries, archive = k_archive, done = false}
if lists[a_part] == nil then
  fail('INVALID', "part is 'msgs', 'summaries', 'archive' or 'done'")
end
local n = #ARGV - ARGS_FROM + 1
if n > MAX_BATCH or (a_part == 'done' and n > 0) then
  fail('INVALID', 'at most ' .. MAX_BATCH .. ' envelopes go in one step, none with done')
end
local m = guarded(K, {'msgs', 'archive', 'summaries'}, {'imp', 'last_id', 'tokens'})
if m.imp == nil then
  local current = tonumber(m.last_id) or 0
  if (tonumber(m.count) or 0) + redis.call('LLEN', k_summaries)
      + redis.call('LLEN', k_archive) > 0 then
    fail('CONFLICT', 'import needs an empty memory: this one holds messages')
  end
  if current >= last and last > 0 then
    fail('CONFLICT', 'this memory has given out ids up to ' .. current
      .. '; the transcript ends at ' .. last)
  end
elseif m.imp ~= a_token then
  fail('CONFLICT', 'another import is writing this memory')
end
if a_part ~= 'done' then
  local held = a_part == 'archive' and (tonumber(m.archived) or 0)
    or (a_part == 'msgs' and (tonumber(m.count) or 0))
    or redis.call('LLEN', k_summaries)
  if held == at + n and n > 0 and m.imp == a_token then
    return {tonumber(m.count) or 0, tonumber(m.last_id) or 0}  -- this step was applied
  elseif held ~= at then
    fail('CONFLICT', 'the import holds ' .. held .. ' ' .. a_part .. ', this step starts at ' .. at)
  end
end
local bytes, previous = 0, nil
local deltas = new_deltas()
local items = {}
if a_part == 'msgs' and (tonumber(m.count) or 0) > 0 then
  previous = envelope_head(bounded(redis.call('LINDEX', k_msgs, -1), MAX_ENVELOPE_BYTES,
    'a message'))
end
for i = 1, n do
  local env = ARGV[ARGS_FROM + i - 1]
  if not string.match(env, ENVELOPE_HEAD) or string.sub(env, -1) ~= '}' then
    fail('INVALID', 'item ' .. i .. ' is not an envelope: ' .. string.sub(env, 1, 60))
  end
  if #env > MAX_ENVELOPE_BYTES then
    fail('TOOLARGE', 'item ' .. i .. ' has ' .. #env .. ' bytes; an envelope has at most '
      .. MAX_ENVELOPE_BYTES)
  end
  local id, tokens, priority = envelope_head(env)
  if priority > MAX_PRIORITY or tokens > MAX_MESSAGE_TOKENS or id < 1 or id > last then
    fail('INVALID', 'item ' .. i .. ' has an id, priority or token count out of range')
  end
  bytes = bytes + #env
  if a_part == 'msgs' then
    if previous and id <= previous then
      fail('INVALID', 'message ids must increase: ' .. id .. ' after ' .. previous)
    end
    previous = id
    account(deltas, 1, tokens, priority)
  elseif a_part == 'summaries' then
    deltas.summary_tokens = (deltas.summary_tokens or 0) + tokens
    deltas.summary_count = (deltas.summary_count or 0) + 1
  end
  items[i] = env
end
if bytes > MAX_CALL_BYTES then
  fail('TOOLARGE', 'the envelopes of one step have at most ' .. MAX_CALL_BYTES .. ' bytes')
end

deltas.last_id = m.imp == nil and last - (tonumber(m.last_id) or 0) or 0
local pins = nil
if a_part == 'msgs' then
  for _, env in ipairs(items) do
    local id, _, priority = envelope_head(env)
    if priority == 0 then
      pins = (pins or redis.call('HGET', k_meta, 'pins') or ',') .. id .. ','
    end
  end
end
local values = apply_deltas(k_meta, deltas, nil, function()
  return pins and {'imp', a_token, 'pins', pins} or {'imp', a_token}
end)
if a_part == 'msgs' or a_part == 'summaries' then
  for i = 1, #items, UNPACK_STEP do
    redis.call('RPUSH', lists[a_part], unpack(items, i, math.min(i + UNPACK_STEP - 1, #items)))
  end
elseif a_part == 'archive' and #items > 0 then
  archive_push(K, items, archive_max)
elseif a_part == 'done' then
  local archived = tonumber(redis.call('HGET', k_meta, 'archived')) or 0
  local base = tonumber(redis.call('HGET', k_meta, 'archive_base')) or 0
  redis.call('HSET', k_meta, 'ix_next', 0, 'ix_seq', archived > base and base + 1 or 0,
    'fmt', DATA_FORMAT, 'ver', string.format('%d', values.last_id) .. ':' .. a_token)
  redis.call('HDEL', k_meta, 'imp')
end
apply_ttl(k_meta, KEYS, ttl_ms)
return {values.count, values.last_id}
