#!lua flags=no-writes
-- context.lua: what to send an LLM, assembled in layers within a token budget, atomically.
-- USES: archive args bm25 envelope
-- KEYS: msgs meta archive summaries recalled ixpost ixdocs facts factord
-- ARGV: budget facts_header summary_share recall_share backfill limit k1 b neighbour_weight terms...
--   budget            tokens the context may take
--   facts_header      tokens of the facts message without its lines (its heading and the
--                     per-message overhead, counted by the client's counter); -1: leave
--                     the facts out
--   summary_share     the most of what pinned messages leave that summaries take, 0..1
--   recall_share      likewise for recalled messages and the query's hits, 0..1
--   backfill          1: when every live message fits, fill what is left from the archive,
--                     newest first (what the summary condensed, in the original); 0: no
--   limit, k1, b, neighbour_weight   search parameters, as for search.lua
--   terms             the query's terms; none: no search
-- Returns: {n_pinned, pinned..., n_facts, (key, 'tokens<TAB>value')..., n_summaries, summaries..., n_recall, (score, envelope)...,
--          n_backfill, backfill..., n_window, window...}; every layer oldest first but
--          recalled messages and hits, best hits first, then recalled newest first; score is
--          '' for a recalled message.
-- Layers claim the budget in this order: pinned messages (priority 0, all of them, else the
-- error), session facts (newest set first, all that fit what pinned messages leave, the
-- oldest dropped first), summaries (newest first, up to their share of what is left), recalled messages and hits (up to
-- their share), the newest live messages (stopping at the first that does not fit: a
-- window is contiguous), then the backfill. A share a layer leaves unused goes to the
-- window.
-- Errors: COMPOZY_OVERFLOW when the pinned messages alone exceed the budget.
local budget = int_arg(a_budget, 'budget', 0, nil)
local facts_header = int_arg(a_facts_header, 'facts_header', -1, MAX_MESSAGE_TOKENS)
local summary_share, recall_share = tonumber(a_summary_share), tonumber(a_recall_share)
if summary_share == nil or recall_share == nil or summary_share < 0 or recall_share < 0
    or summary_share + recall_share > 1 then
  fail('INVALID', 'summary_share and recall_share are numbers >= 0 that sum to at most 1')
end
local backfill = int_arg(a_backfill, 'backfill', 0, 1)
local limit = int_arg(a_limit, 'limit', 0, 1000)
local k1, b, weight = tonumber(a_k1), tonumber(a_b), tonumber(a_neighbour_weight)
if k1 == nil or b == nil or weight == nil then
  fail('INVALID', 'k1, b and neighbour_weight are numbers')
end
local state = redis.call('HMGET', k_meta, 'p:0:count', 'p:0:tokens', 'count')
local n_pinned, pinned_tokens = tonumber(state[1]) or 0, tonumber(state[2]) or 0
local live = tonumber(state[3]) or 0
if pinned_tokens > budget then
  fail('OVERFLOW', 'the pinned messages (priority 0) alone take ' .. pinned_tokens
    .. ' tokens, more than the budget of ' .. budget)
end
local out = {}

-- 1. Pinned messages, wherever they are in the list (usually first).
local pinned = {}
local scanned = 0
while #pinned < n_pinned and scanned < live do
  local chunk = redis.call('LRANGE', k_msgs, scanned, scanned + 63)
  if #chunk == 0 then
    break
  end
  for i = 1, #chunk do
    local _, _, priority = envelope_head(chunk[i])
    if priority == 0 then
      pinned[#pinned + 1] = chunk[i]
    end
  end
  scanned = scanned + #chunk
end
out[#out + 1] = #pinned
for i = 1, #pinned do
  out[#out + 1] = pinned[i]
end
local rest = budget - pinned_tokens

-- 1b. Session facts (the kernel layer): the most recently set that fit, as one message.
local facts = {}
local order = {}
if facts_header >= 0 then
  order = redis.call('ZREVRANGE', k_factord, 0, -1)
end
if #order > 0 then
  local values = redis.call('HMGET', k_facts, unpack(order))
  local used_facts = facts_header
  for i = 1, #order do
    local value = values[i]
    if value then
      local t = tonumber(string.match(value, '^(%d+)\t')) or 0
      if used_facts + t > rest then
        break
      end
      used_facts = used_facts + t
      table.insert(facts, 1, {order[i], value})
    end
  end
  if #facts > 0 then
    rest = rest - used_facts
  end
end
out[#out + 1] = #facts
for i = 1, #facts do
  out[#out + 1] = facts[i][1]
  out[#out + 1] = facts[i][2]
end
local shared = rest

-- 2. Summaries: the rolling summary, newest first, within their share.
local summaries = redis.call('LRANGE', k_summaries, 0, -1)
local cap = math.floor(rest * summary_share)
local chosen, used = {}, 0
for i = #summaries, 1, -1 do
  local _, t = envelope_head(summaries[i])
  if used + t <= cap then
    used = used + t
    table.insert(chosen, 1, summaries[i])
  end
end
out[#out + 1] = #chosen
for i = 1, #chosen do
  out[#out + 1] = chosen[i]
end
rest = rest - used

-- 3. Hits for the query and recalled messages, within their share.
cap = math.floor(shared * recall_share)
used = 0
local shown = {}
local layer = {}
local function offer(env, score)
  if env == nil or env == '' then
    return
  end
  local id, t = envelope_head(env)
  if not shown[id] and used + t <= cap then
    shown[id] = true
    used = used + t
    layer[#layer + 1] = score
    layer[#layer + 1] = env
  end
end
local terms = {unpack(ARGV, ARGS_FROM)}
if #terms > 0 and limit > 0 then
  for _, hit in ipairs(bm25_search(K, terms, limit, k1, b, weight, 0, nil)) do
    local id = hit[1]
    local score = string.format('%.6f', hit[2])
    offer(archived_by_id(K, id), score)
    offer(archived_by_id(K, id + 1), score)  -- the reply, then what led to it
    offer(archived_by_id(K, id - 1), score)
  end
end
local recalled = redis.call('LRANGE', k_recalled, 0, -1)
for i = #recalled, 1, -1 do
  offer(recalled[i], '')
end
out[#out + 1] = #layer / 2
for i = 1, #layer do
  out[#out + 1] = layer[i]
end
rest = rest - used

-- 4. The newest live messages that fit, skipping pinned ones (shown first already).
local window = {}
local offset, size, reached_oldest = 0, 16, false
while true do
  local chunk = redis.call('LRANGE', k_msgs, -(offset + size), -(offset + 1))
  local stop = false
  for i = #chunk, 1, -1 do
    local _, t, priority = envelope_head(chunk[i])
    if priority ~= 0 then
      if t > rest then
        stop = true
        break
      end
      rest = rest - t
      window[#window + 1] = chunk[i]
    end
  end
  if stop then
    break
  end
  if #chunk < size then
    reached_oldest = true
    break
  end
  offset = offset + size
  size = math.min(size * 2, 512)
end

-- 5. Backfill: every live message fits; what is left shows the newest archived originals.
local filled = {}
if backfill == 1 and reached_oldest and rest > 0 then
  offset, size = 0, 16
  local done = false
  while not done do
    local chunk = redis.call('LRANGE', k_archive, -(offset + size), -(offset + 1))
    for i = #chunk, 1, -1 do
      local env = chunk[i]
      local id, t = envelope_head(env)
      if not shown[id] and not string.find(env, '"type":"summary"', 1, true) then
        if t > rest then
          done = true
          break
        end
        rest = rest - t
        filled[#filled + 1] = env
      end
    end
    if #chunk < size then
      break
    end
    offset = offset + size
    size = math.min(size * 2, 512)
  end
end
out[#out + 1] = #filled
for i = #filled, 1, -1 do
  out[#out + 1] = filled[i]
end
out[#out + 1] = #window
for i = #window, 1, -1 do
  out[#out + 1] = window[i]
end
return out
