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

-- Checks n message triples (tokens, priority, body) in args from index first: tokens and
-- priority in decimal digits (lib/args.lua: digits_or_nil; they go into the envelopes as
-- they are), body the JSON object's text after its '{' (the envelope supplies the '{'; a
-- body is at most MAX_MESSAGE_BYTES with it). Returns the batch: {args, first, n, total
-- (tokens), pinned (messages of priority 0), and by priority (as text): p, the one priority
-- of a batch that has one (one message, most often), with pt and pc, its meta fields; else
-- tokens and count, tables by priority}; batch_push reads each message from args again. A
-- batch of one priority makes no tables but itself: this runs on every append.
local function validate_batch(args, first, n, max_tokens)
  if #args ~= first - 1 + 3 * n then
    fail('INVALID', 'expected ' .. n .. ' message triples, got ' .. (#args - first + 1)
      .. ' arguments')
  end
  local by_tokens, by_count, one = nil, nil, nil
  local bytes, total, pinned = 0, 0, 0
  for i = 1, n do
    local at = first + 3 * (i - 1)
    local priority, body = args[at + 1], args[at + 2]
    -- Labels are built only on failure.
    local tokens = digits_or_nil(args[at], MAX_MESSAGE_TOKENS)
    if tokens == nil then
      fail('INVALID', 'message ' .. i .. ' tokens must be an integer in [0, '
        .. MAX_MESSAGE_TOKENS .. '] in decimal digits, got ' .. args[at])
    end
    if max_tokens > 0 and tokens > max_tokens then
      fail('TOOLARGE', 'message ' .. i .. ' has ' .. tokens
        .. ' tokens, more than the memory limit of ' .. max_tokens)
    end
    if digits_or_nil(priority, MAX_PRIORITY) == nil then
      fail('INVALID', 'message ' .. i .. ' priority must be an integer in [0, ' .. MAX_PRIORITY
        .. '] in decimal digits, got ' .. priority)
    end
    -- '"' first (a member's name), '}' last: a non-empty JSON object once its '{' is put back.
    if string.byte(body) ~= 34 or string.byte(body, -1) ~= 125 then
      fail('INVALID', 'message ' .. i .. ' body must be a non-empty JSON object')
    end
    local size = #body + 1
    if size > MAX_MESSAGE_BYTES then
      fail('TOOLARGE', 'message ' .. i .. ' has ' .. size .. ' bytes; at most '
        .. MAX_MESSAGE_BYTES .. ' (store larger content with offload)')
    end
    bytes = bytes + size
    if priority == '0' then
      pinned = pinned + 1
    end
    if one == nil and by_tokens == nil then
      one = priority
    elseif priority ~= one and by_tokens == nil then
      by_tokens, by_count = {[one] = total}, {[one] = i - 1}
      one = nil
    end
    if by_tokens ~= nil then
      by_tokens[priority] = (by_tokens[priority] or 0) + tokens
      by_count[priority] = (by_count[priority] or 0) + 1
    end
    total = total + tokens
  end
  if bytes > MAX_CALL_BYTES then
    fail('TOOLARGE', 'the messages of one call have ' .. bytes .. ' bytes; at most '
      .. MAX_CALL_BYTES)
  end
  return {args = args, first = first, n = n, total = total, pinned = pinned, p = one,
    pt = one and 'p:' .. one .. ':tokens', pc = one and 'p:' .. one .. ':count',
    tokens = by_tokens, count = by_count}
end

-- The version after a write whose last id is last_id; mark: the write's dedupe key, or ''
-- (then us, the server clock in microseconds, or TIME, makes one).
local function next_version(last_id, mark, us)
  if mark == '' then
    return string.format('%d:t%d', last_id, us or now_us())
  end
  return string.format('%d:%s', last_id, mark)
end

-- A batch's write, in steps, so a script can act between them: batch_read (one HMGET of all
-- the write needs), batch_check (every refusal, before any write), batch_push (the
-- envelopes), batch_meta (one HSET). push_batch runs them all. They run on every append, so
-- they are written for the server's time, which goes less to the commands a script calls
-- than to what it makes between them: each table, each string (the server hashes every
-- byte of one), each conversion of a number from text or to text (tonumber and
-- string.format each cost about what a small command does). So the fields are named once,
-- numbers the client sent as digits stay text, the clock is read as text (lib/clock.lua:
-- now_texts), and the totals go to HSET as numbers (the server writes an integer's digits).

-- Reads meta's fields a batch's write needs, with one HMGET: inc, fmt, imp, the totals, the
-- batch's priorities' totals, 'pins' when it pins messages, and extra (a field name, or nil).
-- Returns them by field (text; nil when missing), but last_id and count, which every step
-- computes with: numbers (0 when missing), converted once.
local function batch_read(k, batch, extra)
  local v
  if batch.p ~= nil and batch.pinned == 0 then  -- one priority, none pinned: most writes
    local pt, pc = batch.pt, batch.pc
    if extra == nil then
      v = redis.call('HMGET', k.meta, 'inc', 'fmt', 'imp', 'last_id', 'tokens', 'count',
        'summary_tokens', pt, pc)
      return {inc = v[1] or nil, fmt = v[2] or nil, imp = v[3] or nil,
        last_id = tonumber(v[4]) or 0, tokens = v[5] or nil, count = tonumber(v[6]) or 0,
        summary_tokens = v[7] or nil, [pt] = v[8] or nil, [pc] = v[9] or nil}
    end
    v = redis.call('HMGET', k.meta, 'inc', 'fmt', 'imp', 'last_id', 'tokens', 'count',
      'summary_tokens', pt, pc, extra)
    -- A missing field comes as false. The constructor sizes the table for these at once.
    return {inc = v[1] or nil, fmt = v[2] or nil, imp = v[3] or nil,
      last_id = tonumber(v[4]) or 0, tokens = v[5] or nil, count = tonumber(v[6]) or 0,
      summary_tokens = v[7] or nil, [pt] = v[8] or nil, [pc] = v[9] or nil,
      [extra] = v[10] or nil}
  end
  local fields = {'inc', 'fmt', 'imp', 'last_id', 'tokens', 'count', 'summary_tokens'}
  if batch.p ~= nil then
    fields[#fields + 1] = batch.pt
    fields[#fields + 1] = batch.pc
  else
    for q in pairs(batch.count or {}) do  -- (none for a batch of no messages)
      fields[#fields + 1] = 'p:' .. q .. ':tokens'
      fields[#fields + 1] = 'p:' .. q .. ':count'
    end
  end
  if batch.pinned > 0 then
    fields[#fields + 1] = 'pins'
  end
  fields[#fields + 1] = extra
  v = redis.call('HMGET', k.meta, unpack(fields))
  local m = {}
  for i = 1, #fields do
    m[fields[i]] = v[i] or nil
  end
  m.last_id, m.count = tonumber(m.last_id) or 0, tonumber(m.count) or 0
  return m
end

-- Refuses (nothing written) a memory of a newer format, one an import is filling, a new
-- memory (no meta) some of whose parts are there (an evicted meta; parts, a list or nil,
-- names them), and a batch that would pin more than MAX_PINNED messages. An existing
-- memory's msgs is checked by batch_push.
local function batch_check(k, batch, m, parts)
  check_format(m)
  -- Totals no memory reaches (a tenant's planted exponent, nan, inf or a negative): refused
  -- before anything is written, as the reply's totals would not read back as counts.
  local tokens = tonumber(m.tokens) or 0
  if not (m.last_id >= 0 and m.last_id < MAX_TOTAL and m.count >= 0 and m.count < MAX_TOTAL
      and tokens >= 0 and tokens < MAX_TOTAL) then
    fail('CORRUPT', "meta's last_id, count or tokens is not a count a memory reaches")
  end
  check_not_importing(m)
  if m.inc == nil then
    local new_parts = {}
    for _, name in ipairs(parts or {}) do
      new_parts[name] = {k[name]}
    end
    check_parts(m, k, new_parts)
  end
  if batch.pinned > 0 and (tonumber(m['p:0:count']) or 0) + batch.pinned > MAX_PINNED then
    fail('INVALID', 'a memory holds at most ' .. MAX_PINNED .. ' pinned messages (priority 0)')
  end
end

-- Pushes the batch's envelopes (time stamped ts, milliseconds as text) after the live
-- messages; returns first_id, last_id, whether this created msgs, and last_id as text. The
-- length RPUSH returns is the check that msgs held what meta counts: when it did not (its
-- key was evicted or deleted), the envelopes are popped again and the write is refused,
-- leaving the memory as it was.
local function batch_push(k, batch, m, ts)
  local n, args = batch.n, batch.args
  local last_id = m.last_id + n
  local first_id = last_id - n + 1
  if n == 0 then
    return first_id, last_id, false, string.format('%d', last_id)
  end
  local length, id
  if n == 1 then
    local at = batch.first
    id = string.format('%d', first_id)
    length = redis.call('RPUSH', k.msgs, envelope_text(id, ts, args[at], args[at + 1],
      args[at + 2]))
  else
    local envelopes = {}
    for i = 1, n do
      local at = batch.first + 3 * (i - 1)
      id = string.format('%d', first_id + i - 1)
      envelopes[#envelopes + 1] = envelope_text(id, ts, args[at], args[at + 1], args[at + 2])
      if #envelopes == UNPACK_STEP or i == n then
        length = redis.call('RPUSH', k.msgs, unpack(envelopes))
        envelopes = {}
      end
    end
  end
  local count = m.count
  if length ~= count + n then
    redis.call('RPOP', k.msgs, n)
    fail('EVICTED', 'msgs holds ' .. (length - n) .. ' where meta says ' .. count
      .. ': keys of this memory were evicted or deleted')
  end
  return first_id, last_id, length == n, id
end

-- Writes meta after a pushed batch with one HSET: the totals, the last id (last, as text),
-- the version (last .. ':' .. mark: the write's dedupe key, or 't' and us, the server clock
-- in microseconds as text, for a write without one; next_version), the fields in more
-- (field, value, ...; or nil), the pinned ids, an incarnation (us) for a new memory, and one
-- more in counter (a field batch_read read as its extra, or nil). Returns the new totals,
-- summary tokens, incarnation and version.
local function batch_meta(k, batch, m, last, mark, us, more, counter)
  local n = batch.n
  local tokens = (tonumber(m.tokens) or 0) + batch.total
  local count = m.count + n
  local ver = last .. ':' .. (mark ~= '' and mark or 't' .. us)
  local out
  if batch.p ~= nil then
    local pt, pc = batch.pt, batch.pc
    out = {'last_id', last, 'tokens', tokens, 'count', count, 'ver', ver,
      pt, (tonumber(m[pt]) or 0) + batch.total, pc, (tonumber(m[pc]) or 0) + n}
  else
    out = {'last_id', last, 'tokens', tokens, 'count', count, 'ver', ver}
    for q, added in pairs(batch.tokens or {}) do
      local field = 'p:' .. q .. ':tokens'
      out[#out + 1] = field
      out[#out + 1] = (tonumber(m[field]) or 0) + added
      field = 'p:' .. q .. ':count'
      out[#out + 1] = field
      out[#out + 1] = (tonumber(m[field]) or 0) + batch.count[q]
    end
  end
  if more ~= nil then
    for i = 1, #more do
      out[#out + 1] = more[i]
    end
  end
  if batch.pinned > 0 then
    local pins = m.pins or ','
    local first_id = tonumber(last) - n + 1
    for i = 1, n do
      if batch.args[batch.first + 3 * (i - 1) + 1] == '0' then
        pins = pins .. string.format('%d', first_id + i - 1) .. ','
      end
    end
    out[#out + 1] = 'pins'
    out[#out + 1] = pins
  end
  local inc = m.inc
  if inc == nil then
    inc = us
    out[#out + 1] = 'inc'
    out[#out + 1] = inc
    out[#out + 1] = 'fmt'
    out[#out + 1] = DATA_FORMAT
    stamp_lineage(out)  -- lib/deltas.lua: lineage
  end
  if counter then
    out[#out + 1] = counter
    out[#out + 1] = (tonumber(m[counter]) or 0) + 1
  end
  redis.call('HSET', k.meta, unpack(out))
  -- Summary tokens as a number, as the reply has always carried them (and a tenant's text in
  -- the field reads as 0, as for every total: this runs after the write, so it may not fail
  -- the call); converted only for a memory that has them.
  local summary_tokens = m.summary_tokens
  return tokens, count, summary_tokens and (tonumber(summary_tokens) or 0) or 0, inc, ver
end

-- Stores a validated batch after the live messages; returns first_id, last_id, the new
-- totals, summary tokens, incarnation and version. Refuses (nothing written) what
-- batch_check and batch_push refuse. k: the memory's keys; parts: those whose existence
-- tells an evicted meta from a new memory; mark: as for batch_meta; counter: a meta field
-- to add one to, or nil.
local function push_batch(k, batch, parts, mark, counter)
  local m = batch_read(k, batch, counter)
  batch_check(k, batch, m, parts)
  local ts, us = now_texts()
  local first_id, last_id, _, last = batch_push(k, batch, m, ts)
  return first_id, last_id, batch_meta(k, batch, m, last, mark, us, nil, counter)
end

-- Reads the oldest prefix_len live messages and checks that they are the ids the caller
-- saw, args[from + 1 .. from + prefix_len] (COMPOZY_MOVED if not: read again and retry);
-- returns them with their {tokens, priority}.
local function checked_prefix(k_msgs, args, from, prefix_len)
  if prefix_len == 0 then
    return {}, {}  -- (LRANGE 0 -1 would read the whole list)
  end
  local prefix = envelopes_read(k_msgs, 'a message', 0, prefix_len - 1)
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
