-- lib/batch.lua: message batches: validating the (tokens, priority, body) triples a write
-- carries, storing them, and what every write to the conversation records in meta: the
-- pinned messages' ids and the version.
-- USES: args clock deltas envelope meta
--
-- meta's 'ver' names the conversation's content, not only its length: '<last_id>:<mark>',
-- where mark is the write's dedupe key (unique to one write) or, for writes without one,
-- the server clock in microseconds. A compare-and-set on it (replace(if_version=)) fails
-- whenever any other write happened since, even one that brought last_id back to the same
-- number (a failover to a replica that missed writes, then other writers).
-- 'pins' lists the ids of the pinned messages (',7,9,'), so a context finds them wherever
-- they are without scanning the conversation.

-- Checks n message triples (tokens, priority, body) in args from index first and returns
-- them parsed: {tokens = {...}, priority = {...}, body = {...}, pinned = n pinned}.
local function validate_batch(args, first, n, max_tokens)
  if #args ~= first - 1 + 3 * n then
    fail('INVALID', 'expected ' .. n .. ' message triples, got ' .. (#args - first + 1)
      .. ' arguments')
  end
  local batch = {tokens = {}, priority = {}, body = {}, pinned = 0}
  local bytes = 0
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
    local priority = int_or_nil(args[at + 1], 0, MAX_PRIORITY)
      or int_arg(args[at + 1], 'message ' .. i .. ' priority', 0, MAX_PRIORITY)
    batch.priority[i] = priority
    if priority == 0 then
      batch.pinned = batch.pinned + 1
    end
    local body = args[at + 2]
    if string.sub(body, 1, 2) ~= '{"' or string.sub(body, -1) ~= '}' then
      fail('INVALID', 'message ' .. i .. ' body must be a non-empty JSON object')
    end
    if #body > MAX_MESSAGE_BYTES then
      fail('TOOLARGE', 'message ' .. i .. ' has ' .. #body .. ' bytes; at most '
        .. MAX_MESSAGE_BYTES .. ' (store larger content with offload)')
    end
    bytes = bytes + #body
    batch.body[i] = body
  end
  if bytes > MAX_CALL_BYTES then
    fail('TOOLARGE', 'the messages of one call have ' .. bytes .. ' bytes; at most '
      .. MAX_CALL_BYTES)
  end
  return batch
end

-- The version after a write whose last id is last_id; mark: the write's dedupe key, or ''.
local function next_version(last_id, mark)
  if mark == '' then
    mark = 't' .. string.format('%d', now_us())
  end
  return string.format('%d', last_id) .. ':' .. mark
end

-- Stores a validated batch after the live messages; returns first_id, last_id and the new
-- meta values (with 'ver'). Refuses (nothing written) a memory of a newer format, one whose
-- keys were partly evicted, and a batch that would pin more than MAX_PINNED messages.
-- k: the memory's keys; parts: those whose existence tells an evicted meta from a new
-- memory; mark: as for next_version.
local function push_batch(k, batch, deltas, parts, mark)
  local n = #batch.tokens
  -- Totals by priority first: one account() (two field names) a priority, not a message.
  local by_priority = {}
  for i = 1, n do
    local p = batch.priority[i]
    local sum = by_priority[p]
    if sum == nil then
      by_priority[p] = {batch.tokens[i], 1}
    else
      sum[1], sum[2] = sum[1] + batch.tokens[i], sum[2] + 1
    end
  end
  for p, sum in pairs(by_priority) do
    account(deltas, 1, sum[1], p, sum[2])
  end
  deltas.last_id = (deltas.last_id or 0) + n
  local pins = nil
  local values = apply_deltas(k.meta, deltas, function(before)
    check_format(before)
    check_not_importing(before)
    if before.inc == nil then
      local new_parts = {}
      for _, name in ipairs(parts) do
        new_parts[name] = {k[name]}
      end
      check_parts(before, k, new_parts)
    else
      check_parts(before, k, {msgs = {k.msgs, tonumber(before.count) or 0}})
    end
    if batch.pinned > 0 then
      if (tonumber(before['p:0:count']) or 0) + batch.pinned > MAX_PINNED then
        fail('INVALID', 'a memory holds at most ' .. MAX_PINNED .. ' pinned messages '
          .. '(priority 0)')
      end
      pins = redis.call('HGET', k.meta, 'pins') or ','
    end
  end, function(values)
    values.ver = next_version(values.last_id, mark)
    local out = {'ver', values.ver}
    if pins then
      local first = values.last_id - n + 1
      for i = 1, n do
        if batch.priority[i] == 0 then
          pins = pins .. (first + i - 1) .. ','
        end
      end
      out[3], out[4] = 'pins', pins
    end
    return out
  end)
  local last_id = values.last_id
  local first_id = last_id - n + 1
  local ts = now_ms()
  local envelopes = {}
  for i = 1, n do
    envelopes[#envelopes + 1] = envelope(first_id + i - 1, ts, batch.tokens[i],
      batch.priority[i], batch.body[i])
    if #envelopes == 512 then
      redis.call('RPUSH', k.msgs, unpack(envelopes))
      envelopes = {}
    end
  end
  if #envelopes > 0 then
    redis.call('RPUSH', k.msgs, unpack(envelopes))
  end
  return first_id, last_id, values
end

-- Reads the oldest prefix_len live messages and checks that they are the ids the caller
-- saw, args[from + 1 .. from + prefix_len] (COMPOZY_MOVED if not: read again and retry);
-- returns them with their {tokens, priority}.
local function checked_prefix(k_msgs, args, from, prefix_len)
  if prefix_len == 0 then
    return {}, {}  -- (LRANGE 0 -1 would read the whole list)
  end
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

-- Fails with COMPOZY_UNINDEXED unless message id is indexed (ix_next: meta's, as a number):
-- a message moves to the archive only once indexed. Pinned messages are never indexed (and
-- move only with replace).
local function check_indexed(id, priority, ix_next)
  if priority ~= 0 and id >= ix_next then
    fail('UNINDEXED', 'message ' .. id .. ' is not indexed yet (the index is at ' .. ix_next
      .. '): run the indexer, then again')
  end
end
