-- lib/batch.lua: message batches: validating the (tokens, priority, body) triples a write carries,
-- storing them, and checking that the oldest messages are those a caller read.
-- USES: args clock envelope meta

-- Checks n message triples (tokens, priority, body) in args from index first and returns
-- them parsed: {tokens = {...}, priority = {...}, body = {...}}, numbers normalised.
local function validate_batch(args, first, n, max_tokens)
  if #args ~= first - 1 + 3 * n then
    fail('INVALID', 'expected ' .. n .. ' message triples, got ' .. (#args - first + 1)
      .. ' arguments')
  end
  local batch = {tokens = {}, priority = {}, body = {}}
  for i = 1, n do
    local at = first + 3 * (i - 1)
    -- Labels are built only on failure: this loop runs on every append.
    local tokens = int_or_nil(args[at], 0, MAX_MESSAGE_TOKENS)
      or int_arg(args[at], 'message ' .. i .. ' tokens', 0, MAX_MESSAGE_TOKENS)
    if max_tokens > 0 and tokens > max_tokens then
      fail('TOOLARGE', 'message ' .. i .. ' has ' .. tokens
        .. ' tokens, more than the memory limit of ' .. max_tokens)
    end
    batch.tokens[i] = tokens
    batch.priority[i] = int_or_nil(args[at + 1], 0, MAX_PRIORITY)
      or int_arg(args[at + 1], 'message ' .. i .. ' priority', 0, MAX_PRIORITY)
    local body = args[at + 2]
    if string.sub(body, 1, 2) ~= '{"' or string.sub(body, -1) ~= '}' then
      fail('INVALID', 'message ' .. i .. ' body must be a non-empty JSON object')
    end
    batch.body[i] = body
  end
  return batch
end

-- Stores a validated batch; returns first_id, last_id and the new meta values.
local function push_batch(msgs, meta, batch, extra_deltas)
  local n = #batch.tokens
  local deltas = extra_deltas or new_deltas()
  for i = 1, n do
    account(deltas, 1, batch.tokens[i], batch.priority[i])
  end
  deltas.last_id = (deltas.last_id or 0) + n
  local values = apply_deltas(meta, deltas)
  local last_id = values.last_id
  local first_id = last_id - n + 1
  local ts = now_ms()
  local envelopes = {}
  for i = 1, n do
    envelopes[#envelopes + 1] = envelope(first_id + i - 1, ts, batch.tokens[i],
      batch.priority[i], batch.body[i])
    if #envelopes == 512 then
      redis.call('RPUSH', msgs, unpack(envelopes))
      envelopes = {}
    end
  end
  if #envelopes > 0 then
    redis.call('RPUSH', msgs, unpack(envelopes))
  end
  return first_id, last_id, values
end

-- Reads the oldest prefix_len live messages and checks that they are the ids the caller
-- saw, args[from + 1 .. from + prefix_len] (COMPOZY_MOVED if not: read again and retry);
-- returns them with their {tokens, priority}.
local function checked_prefix(k_msgs, args, from, prefix_len)
  local prefix = redis.call('LRANGE', k_msgs, 0, prefix_len - 1)
  if #prefix ~= prefix_len then
    fail('MOVED', 'the memory has fewer messages than the plan saw')
  end
  local heads = {}
  for i = 1, prefix_len do
    local id, tokens, priority = envelope_head(prefix[i])
    if string.format('%d', id) ~= args[from + i] then
      fail('MOVED', 'message ' .. i .. ' is ' .. id .. ', the plan saw ' .. args[from + i])
    end
    heads[i] = {tokens, priority}
  end
  return prefix, heads
end

-- Splits a checked prefix into what stays and what goes; remove maps an id (as text) to its
-- index terms. Accounts what goes in deltas. Refuses ids outside the prefix, and pinned ones
-- unless pinned_ok.
local function split_prefix(prefix, heads, remove, deltas, pinned_ok)
  local kept, removed, terms = {}, {}, {}
  local removed_tokens = 0
  for i = 1, #prefix do
    local id = string.format('%d', (envelope_head(prefix[i])))
    local doc = remove[id]
    if doc ~= nil then
      if heads[i][2] == 0 and not pinned_ok then
        fail('INVALID', 'message ' .. id .. ' is pinned (priority 0) and never removed')
      end
      removed[#removed + 1] = prefix[i]
      terms[#terms + 1] = doc
      removed_tokens = removed_tokens + heads[i][1]
      account(deltas, -1, heads[i][1], heads[i][2])
      remove[id] = nil
    else
      kept[#kept + 1] = prefix[i]
    end
  end
  if next(remove) ~= nil then
    fail('INVALID', 'an id to remove is not among the messages the plan saw')
  end
  return kept, removed, terms, removed_tokens
end
