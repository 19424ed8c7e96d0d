#!lua flags=no-writes
-- context.lua: what to send an LLM, assembled in layers within a token budget, atomically.
-- USES: args docs envelope meta query
-- KEYS: msgs meta archive summaries recalled ixseg ixdocs ixgone facts factord
-- ARGV: budget facts_header summary_share recall_share backfill max_messages limit hits tail_from inc
--   budget            tokens the context may take
--   facts_header      tokens of the facts message without its lines (its heading and the
--                     per-message overhead, counted by the client's counter); -1: leave
--                     the facts out
--   summary_share     the most of what pinned messages leave that summaries take, 0..1
--   recall_share      likewise for recalled messages and the query's hits, 0..1
--   backfill          1: when every live message fits, fill what is left from the archive,
--                     newest first (what the summary condensed, in the original); 0: no
--   max_messages      the window, the recall layer and the backfill hold at most this many
--                     messages together (the recall layer at most recall_share of them),
--                     the newest; -1: MAX_CONTEXT_MESSAGES (always the most)
--   limit             the recall layer takes the best limit hits the window does not show
--   hits              '' (no query) or the query's hits as the client ranked them
--                     (compozy_memory/_search/scoring.py, fused with dense scores where an
--                     embedder is set): comma-separated ids, best first, at most
--                     MAX_SEARCH_LIMIT (more than limit: some may be in the window); an id
--                     no longer indexed is passed over
--   tail_from         as for search_fetch.lua: from there on (and from meta's ix_next on),
--                     hits without a record are the live tail the client ranked; 0: none
--   inc               as for search_fetch.lua: the incarnation the client ranked the hits in
--                     ('' for any); in another (the memory expired and was written again)
--                     the hits are passed over
-- REPLY: {unindexed incarnation version pinned[] facts[2] summaries[] recall[2] backfill[] window[]}
--   unindexed  messages the query could not search yet (lib/query.lua)
--   incarnation, version  the memory's, as read (for a later compare-and-set)
--   pinned     the pinned messages (priority 0), oldest first
--   facts      (key, 'tokens<TAB>value') pairs, least recently set first
--   summaries  oldest first
--   recall     (score, envelope) pairs: the query's hits and their neighbours, best first,
--              then recalled messages, newest first; score is '' for a recalled message,
--              and a hit's rank (1 = best) for hits the client ranked
--   backfill, window  oldest first
-- Layers claim the budget in this order: pinned messages (all of them, else the error),
-- session facts (newest set first, all that fit what pinned messages leave), summaries
-- (newest first, up to their share of what is left), the window's share (the newest live
-- messages that fit what the summaries and the recall share leave: a window is contiguous),
-- recalled messages and hits that are not in that window (up to their share), then the
-- window again with what the recall layer left (going no further back than a message the
-- recall layer shows), then the backfill. Each message appears once, and the layers read
-- in the conversation's order: what the recall layer shows of the live conversation is
-- older than the window. A window never starts with a tool result whose call it left out.
-- Errors: COMPOZY_OVERFLOW when the pinned messages alone exceed the budget;
-- COMPOZY_INVALID, COMPOZY_FORMAT, COMPOZY_EVICTED
local budget = int_arg(a_budget, 'budget', 0, nil)
local facts_header = int_arg(a_facts_header, 'facts_header', -1, MAX_MESSAGE_TOKENS)
local summary_share, recall_share = tonumber(a_summary_share), tonumber(a_recall_share)
if summary_share == nil or recall_share == nil or summary_share < 0 or recall_share < 0
    or summary_share + recall_share > 1 then
  fail('INVALID', 'summary_share and recall_share are numbers >= 0 that sum to at most 1')
end
local backfill = int_arg(a_backfill, 'backfill', 0, 1)
local max_messages = int_arg(a_max_messages, 'max_messages', -1, nil)
-- A count limit gives the recall layer its share of the messages, as a budget does of tokens.
local recall_most = math.huge
if max_messages >= 0 and max_messages <= MAX_CONTEXT_MESSAGES then
  recall_most = math.floor(max_messages * recall_share)
else
  max_messages = MAX_CONTEXT_MESSAGES
end
local limit = int_arg(a_limit, 'limit', 0, MAX_SEARCH_LIMIT)
local tail_from = a_tail_from == '0' and 0 or int_arg(a_tail_from, 'tail_from', 0, nil)
local ranked = {}
for id in string.gmatch(a_hits, '[^,]+') do
  if #ranked >= MAX_SEARCH_LIMIT then
    fail('INVALID', 'at most ' .. MAX_SEARCH_LIMIT .. ' hits')
  end
  ranked[#ranked + 1] = {int_arg(id, 'a hit id', 1, nil), tostring(#ranked + 1)}
end
local m = guarded(K, {'msgs', 'archive', 'summaries', 'index', 'ixgone'},
  {'ix_next', 'ix_seq', 'last_id', 'p:0:count', 'p:0:tokens', 'pins', 'ver', 'tokens'})
local n_pinned, pinned_tokens = tonumber(m['p:0:count']) or 0, tonumber(m['p:0:tokens']) or 0
local live = tonumber(m.count) or 0
if n_pinned > MAX_PINNED then
  fail('CORRUPT', 'meta counts ' .. n_pinned .. ' pinned messages, more than the ' .. MAX_PINNED
    .. ' a memory holds: it was written raw')
end
-- The live messages are sized before any is read (stored data may have been planted raw:
-- lib/args.lua), and every envelope read after.
sized(k_msgs, 'msgs', live, MAX_ENVELOPE_BYTES)
if pinned_tokens > budget then
  fail('OVERFLOW', 'the pinned messages (priority 0) alone take ' .. pinned_tokens
    .. ' tokens, more than the budget of ' .. budget)
end
local out = {unindexed(m), m.inc or '', version_of(m)}
local shown = {}
local function put_list(list)
  out[#out + 1] = #list
  for i = 1, #list do
    out[#out + 1] = list[i]
  end
end

-- 1. Pinned messages: usually the oldest; else found by the ids meta lists (a memory of an
-- older format, without that list, is looked through from its start, boundedly).
local pinned = {}
if n_pinned > 0 then
  local front = envelopes_read(k_msgs, 'a message', 0, n_pinned - 1)
  for _, env in ipairs(front) do
    local id, _, priority = envelope_head(env)
    if priority == 0 then
      pinned[#pinned + 1] = env
      shown[id] = true
    end
  end
  if #pinned < n_pinned and m.pins then
    pinned, shown = {}, {}
    local listed = 0
    for id in string.gmatch(m.pins, '%d+') do
      listed = listed + 1
      if listed > MAX_PINNED then
        fail('CORRUPT', 'meta lists more than the ' .. MAX_PINNED .. ' pinned messages a '
          .. 'memory holds: it was written raw')
      end
      local at, _, env = live_index(k_msgs, tonumber(id), live)
      if at then
        pinned[#pinned + 1] = bounded(env, MAX_ENVELOPE_BYTES, 'a message')
        shown[tonumber(id)] = true
      end
    end
  elseif #pinned < n_pinned then
    local scan = envelopes_read(k_msgs, 'a message', n_pinned, MOVE_STEP + MAX_PINNED - 1)
    for _, env in ipairs(scan) do
      local id, _, priority = envelope_head(env)
      if priority == 0 then
        pinned[#pinned + 1] = env
        shown[id] = true
      end
    end
  end
end
put_list(pinned)
local rest = budget - pinned_tokens

-- 2. Session facts (the kernel layer): the most recently set that fit, as one message.
local facts = {}
if facts_header >= 0 then
  check_facts(k_facts, k_factord, true)
  local order = redis.call('ZREVRANGE', k_factord, 0, MAX_FACTS - 1)
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
        facts[#facts + 1] = {order[i], value}
      end
    end
    if #facts > 0 then
      rest = rest - used_facts
    end
  end
end
out[#out + 1] = #facts
for i = #facts, 1, -1 do
  out[#out + 1] = facts[i][1]
  out[#out + 1] = facts[i][2]
end
local shared = rest

-- 3. Summaries: the rolling summary, newest first, within their share.
local summaries = summaries_read(K)
local cap = math.floor(rest * summary_share)
local chosen, used = {}, 0
for i = #summaries, 1, -1 do
  local id, t = envelope_head(summaries[i])
  if used + t <= cap then
    used = used + t
    shown[id] = true
    table.insert(chosen, 1, summaries[i])
  end
end
put_list(chosen)
rest = rest - used

-- 4. The window: the newest live messages that fit, skipping pinned ones (shown already).
-- It is read newest first in growing chunks, and can go on where it stopped.
local recall_cap = math.floor(shared * recall_share)
local window, window_ids = {}, {}
local offset, size, reached_oldest = 0, 16, false
local window_first = max_messages
if recall_most < max_messages then
  window_first = max_messages - recall_most
end
-- The first chunk holds what the window may take (all that is left, when the recall layer
-- leaves its share: no query, nothing recalled) at the live messages' mean size, and the
-- one after (the first that does not fit stops the window): each envelope read costs the
-- server its bytes twice (copied into Lua, hashed there), so the usual window is read in one
-- chunk of about its own length rather than in chunks of 16, 32, ...
local unpinned = live - n_pinned
if unpinned > 0 then
  local mean = ((tonumber(m.tokens) or 0) - pinned_tokens) / unpinned
  local fits = mean > 0 and math.floor(rest / mean) or max_messages
  -- (floored: meta's counts may have been planted as fractions, and LRANGE takes integers)
  size = math.floor(math.max(4, math.min(fits, max_messages, unpinned) + 2))
  -- At most 128 at first: a mean that misleads (many short old messages, then long ones)
  -- reads more chunks after, never hundreds of envelopes the window does not take.
  size = math.min(size, 128)
end
local pending, next_pending = {}, 1  -- the last chunk read, newest first, from next_pending
local function extend(room, most)
  while #window < most do
    if next_pending > #pending then
      if reached_oldest then
        return room
      end
      local chunk = envelopes_read(k_msgs, 'a message', -(offset + size), -(offset + 1))
      pending, next_pending = {}, 1
      for i = #chunk, 1, -1 do
        pending[#pending + 1] = chunk[i]
      end
      if #chunk < size then
        reached_oldest = true
      end
      offset = offset + size
      size = math.min(size * 2, UNPACK_STEP)
    else
      local env = pending[next_pending]
      local id, t, priority = envelope_head(env)
      if priority ~= 0 then
        -- The window is contiguous: it stops at the first message that does not fit, or
        -- that the recall layer shows already (older than the window, as it should be).
        if t > room or shown[id] then
          return room
        end
        room = room - t
        window[#window + 1] = env
        window_ids[id] = true
      end
      next_pending = next_pending + 1
    end
  end
  return room
end
rest = extend(rest - recall_cap, window_first) + recall_cap

-- 5. Hits for the query, their neighbours, and recalled messages, within their share, each
-- once and none the window shows already.
used = 0
local layer = {}
local function offer(env, score)
  if env == nil or env == '' then
    return
  end
  local id, t = envelope_head(env)
  if not shown[id] and not window_ids[id] and used + t <= recall_cap
      and #layer / 2 < recall_most then
    shown[id] = true
    used = used + t
    layer[#layer + 1] = score
    layer[#layer + 1] = env
  end
end
if #ranked > 0 and limit > 0 and (tonumber(m.fmt) or 1) >= DATA_FORMAT
    and (a_inc == '' or (m.inc or '') == a_inc) then
  local docs = doc_reader(k_ixdocs)
  -- Hits past the index (the live tail the client ranked itself) are found in the live list.
  local state = {count = live, archive_base = tonumber(m.archive_base) or 0,
    ix_next = tail_from > 0 and math.max(tonumber(m.ix_next) or 1, tail_from) or nil}
  local hits = ranked
  -- The limit counts hits outside the window: a query taken from the newest user turn
  -- matches that turn and its neighbours first, which the window shows already.
  local taken = 0
  for _, hit in ipairs(hits) do
    if taken >= limit then
      break
    end
    local id = hit[1]
    local env = not window_ids[id] and (locate(K, docs, id, state))
    if env then  -- a hit the cap dropped since the client ranked it is passed over
      taken = taken + 1
      local score = hit[2]
      offer(env, score)
      offer((locate(K, docs, id + 1, state)), score)  -- the reply, then what led to it
      offer((locate(K, docs, id - 1, state)), score)
    end
  end
end
local n_recalled = redis.call('LLEN', k_recalled)
local recalled = n_recalled == 0 and {}
  or envelopes_read(k_recalled, 'a recalled message', -MAX_RECALLED, -1, n_recalled)
for i = #recalled, 1, -1 do
  offer(recalled[i], '')
end
out[#out + 1] = #layer / 2
for i = 1, #layer do
  out[#out + 1] = layer[i]
end
rest = rest - used

-- 6. The window again, with what the recall layer left.
rest = extend(rest, max_messages - #layer / 2)

-- 7. Backfill: every live message fits; what is left shows the newest archived originals.
local filled = {}
if backfill == 1 and reached_oldest and next_pending > #pending and rest > 0 then
  offset, size = 0, 16
  local done = false
  while not done and #window + #filled + #layer / 2 < max_messages do
    local chunk = envelopes_read(k_archive, 'an archived message', -(offset + size),
      -(offset + 1))
    for i = #chunk, 1, -1 do
      local env = chunk[i]
      local id, t = envelope_head(env)
      if not shown[id] and not string.find(env, '"type":"summary"', 1, true) then
        if t > rest or #window + #filled + #layer / 2 >= max_messages then
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
    size = math.min(size * 2, UNPACK_STEP)
  end
end

-- A tool result whose call was left out cannot start what the LLM reads: backfill and
-- window are one run of the conversation, oldest first.
local older = {}
for i = #filled, 1, -1 do
  older[#older + 1] = {env = filled[i], backfill = true}
end
for i = #window, 1, -1 do
  older[#older + 1] = {env = window[i]}
end
local function tool_result(env)
  if not string.find(env, '"tool_call_id":', 1, true)
      and not string.find(env, '"type":"tool_result"', 1, true) then
    return false
  end
  if #env > 65536 then
    return true  -- too large to decode here: the compact JSON's own fields say it
  end
  local message = cjson.decode(env)
  if message.tool_call_id ~= nil then
    return true
  end
  if type(message.content) == 'table' then
    for _, block in ipairs(message.content) do
      if type(block) == 'table' and block.type == 'tool_result' then
        return true
      end
    end
  end
  return false
end
local start = 1
while start <= #older and tool_result(older[start].env) do
  start = start + 1
end
local back, front = {}, {}
for i = start, #older do
  if older[i].backfill then
    back[#back + 1] = older[i].env
  else
    front[#front + 1] = older[i].env
  end
end
put_list(back)
put_list(front)
return out
