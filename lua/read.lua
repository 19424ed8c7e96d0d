#!lua flags=no-writes
-- read.lua: a consistent snapshot of part of a memory with its totals.
-- KEYS: msgs meta summaries
-- ARGV: mode a b
--   mode  'range', 'window' or 'context'
--   range:   a = start, b = stop    LRANGE indices (negative count from the newest)
--   window:  a = max_tokens         the newest messages whose tokens fit this budget
--            b = max_messages       and at most this many; 0 = no limit
--   context: as window, after the summaries, whose tokens come off the budget first
-- Returns: {total_tokens, total_count, last_id, envelope, ...} envelopes oldest first; in
-- context mode {total_tokens, total_count, last_id, n_summaries, summary..., envelope...}.
-- A window stops at the first message that does not fit (it never skips one to fit an older
-- one) and reads the list from the newest end in growing chunks, so its cost follows the size
-- of the window, not of the memory.
local mode = a_mode
local tokens, count, last_id = totals(k_meta)
local out = {tokens, count, last_id}

if mode == 'range' then
  local start = int_arg(a_a, 'start', -2 ^ 52, 2 ^ 52)
  local stop = int_arg(a_b, 'stop', -2 ^ 52, 2 ^ 52)
  local envelopes = redis.call('LRANGE', k_msgs, start, stop)
  for i = 1, #envelopes do
    out[#out + 1] = envelopes[i]
  end
  return out
end

if mode ~= 'window' and mode ~= 'context' then
  fail('INVALID', "mode must be 'range', 'window' or 'context', got " .. tostring(mode))
end
local budget = int_arg(a_a, 'max_tokens', 0, nil)
if mode == 'context' then
  local summaries = redis.call('LRANGE', k_summaries, 0, -1)
  out[#out + 1] = #summaries
  for i = 1, #summaries do
    local _, t = envelope_head(summaries[i])
    budget = budget - t
    out[#out + 1] = summaries[i]
  end
  budget = math.max(budget, 0)
end
local max_messages = int_arg(a_b, 'max_messages', 0, nil)
local picked = {}
local used = 0
local offset = 0
local chunk = 16
local done = false
while not done do
  local envelopes = redis.call('LRANGE', k_msgs, -(offset + chunk), -(offset + 1))
  if #envelopes == 0 then
    break
  end
  for i = #envelopes, 1, -1 do
    local _, t = envelope_head(envelopes[i])
    if used + t > budget or (max_messages > 0 and #picked >= max_messages) then
      done = true
      break
    end
    used = used + t
    picked[#picked + 1] = envelopes[i]
  end
  if #envelopes < chunk then
    break
  end
  offset = offset + chunk
  chunk = math.min(chunk * 2, 512)
end
for i = #picked, 1, -1 do
  out[#out + 1] = picked[i]
end
return out
