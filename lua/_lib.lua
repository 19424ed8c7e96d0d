-- _lib.lua: helpers the loader (compozy_memory/scripts.py) puts at the top of every script,
-- right after its shebang line. It reads no KEYS or ARGV of its own and returns nothing.
--
-- Conventions shared by all scripts:
--   KEYS of a write script are the instance's data keys: msgs, meta, archive, summaries.
--   Errors are raised as 'COMPOZY_<CODE> <text>' before the first write; the client maps
--   INVALID, TOOLARGE and CONFLICT to typed exceptions.
--   An envelope starts with '{"id":N,"ts":T,"tokens":K,"priority":P,' so a script reads
--   those four fields with one pattern match, without decoding JSON.

local MAX_BATCH = 10000
-- A dedupe key is remembered while its append's first id is within this many ids of the
-- newest (and up to DEDUPE_SWEEP more); see dedupe_record.
local DEDUPE_WINDOW = 1000
local DEDUPE_SWEEP = 64
local MAX_DEDUPE_KEY = 256
local MAX_PRIORITY = 99
local ENVELOPE_HEAD = '^{"id":(%d+),"ts":%d+,"tokens":(%d+),"priority":(%d+),'

local function fail(code, text)
  error({err = 'COMPOZY_' .. code .. ' ' .. text})
end

-- Returns value as an integer in [min, max] (max nil = unbounded), or nil.
local function int_or_nil(value, min, max)
  local n = tonumber(value)
  if n == nil or n ~= math.floor(n) or n < min or (max ~= nil and n > max) then
    return nil
  end
  return n
end

local function int_arg(value, name, min, max)
  local n = int_or_nil(value, min, max)
  if n == nil then
    fail('INVALID', name .. ' must be an integer in [' .. min .. ', ' .. tostring(max or 'inf')
      .. '], got ' .. tostring(value))
  end
  return n
end

-- Parses an envelope's id, tokens and priority.
local function envelope_head(env)
  local id, tokens, priority = string.match(env, ENVELOPE_HEAD)
  if id == nil then
    fail('CORRUPT', 'an envelope does not start with id, ts, tokens, priority: '
      .. string.sub(env, 1, 60))
  end
  return tonumber(id), tonumber(tokens), tonumber(priority)
end

-- Checks n message triples (tokens, priority, body) starting at ARGV[first] and returns
-- them parsed: {tokens = {...}, priority = {...}}, numbers normalised.
local function validate_batch(first, n, max_tokens)
  if #ARGV ~= first - 1 + 3 * n then
    fail('INVALID', 'expected ' .. n .. ' message triples, got ' .. (#ARGV - first + 1)
      .. ' arguments')
  end
  local batch = {tokens = {}, priority = {}}
  for i = 1, n do
    local at = first + 3 * (i - 1)
    -- Labels are built only on failure: this loop runs on every append.
    local tokens = int_or_nil(ARGV[at], 0, nil) or int_arg(ARGV[at], 'message ' .. i .. ' tokens', 0, nil)
    if max_tokens > 0 and tokens > max_tokens then
      fail('TOOLARGE', 'message ' .. i .. ' has ' .. tokens
        .. ' tokens, more than the memory limit of ' .. max_tokens)
    end
    batch.tokens[i] = tokens
    batch.priority[i] = int_or_nil(ARGV[at + 1], 0, MAX_PRIORITY)
      or int_arg(ARGV[at + 1], 'message ' .. i .. ' priority', 0, MAX_PRIORITY)
    local body = ARGV[at + 2]
    if string.sub(body, 1, 2) ~= '{"' or string.sub(body, -1) ~= '}' then
      fail('INVALID', 'message ' .. i .. ' body must be a non-empty JSON object')
    end
  end
  return batch
end

-- Meta changes are gathered in a table of field -> delta and written with one HMGET and one
-- HSET, whatever the number of messages and priorities involved.
local function new_deltas()
  return {tokens = 0, count = 0}
end

local function account(deltas, sign, tokens, priority)
  local pt = 'p:' .. priority .. ':tokens'
  local pc = 'p:' .. priority .. ':count'
  deltas.tokens = deltas.tokens + sign * tokens
  deltas.count = deltas.count + sign
  deltas[pt] = (deltas[pt] or 0) + sign * tokens
  deltas[pc] = (deltas[pc] or 0) + sign
end

-- Applies deltas to meta; returns the new values by field.
local function apply_deltas(meta, deltas)
  local fields = {}
  for field in pairs(deltas) do
    fields[#fields + 1] = field
  end
  local current = redis.call('HMGET', meta, unpack(fields))
  local updates, values = {}, {}
  for i, field in ipairs(fields) do
    local value = (tonumber(current[i]) or 0) + deltas[field]
    values[field] = value
    updates[#updates + 1] = field
    updates[#updates + 1] = string.format('%d', value)
  end
  redis.call('HSET', meta, unpack(updates))
  return values
end

-- Stores a validated batch whose body triples start at ARGV[first]; returns first_id, last_id
-- and the new meta values.
local function push_batch(msgs, meta, first, batch, extra_deltas)
  local n = #batch.tokens
  local deltas = extra_deltas or new_deltas()
  for i = 1, n do
    account(deltas, 1, batch.tokens[i], batch.priority[i])
  end
  deltas.last_id = (deltas.last_id or 0) + n
  local values = apply_deltas(meta, deltas)
  local last_id = values.last_id
  local first_id = last_id - n + 1
  local now = redis.call('TIME')
  local ts = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local envelopes = {}
  for i = 1, n do
    envelopes[#envelopes + 1] = string.format('{"id":%d,"ts":%d,"tokens":%d,"priority":%d,',
      first_id + i - 1, ts, batch.tokens[i], batch.priority[i])
      .. string.sub(ARGV[first + 3 * (i - 1) + 2], 2)
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

-- Appends envelopes to the capped archive (the caller counts them in meta's 'archived').
local function archive(archive_key, envelopes, archive_max)
  for i = 1, #envelopes, 512 do
    redis.call('RPUSH', archive_key, unpack(envelopes, i, math.min(i + 511, #envelopes)))
  end
  if archive_max > 0 then
    redis.call('LTRIM', archive_key, -archive_max, -1)
  end
end

-- Sets the instance TTL on every key passed in KEYS (PEXPIRE on a missing key is a no-op).
-- Callers that set no TTL may pass only the keys they write.
local function apply_ttl(ttl_ms)
  if ttl_ms > 0 then
    for i = 1, #KEYS do
      redis.call('PEXPIRE', KEYS[i], ttl_ms)
    end
  end
end

-- Idempotent writes: append and replace carry a dedupe key (a random one per call by
-- default), remembered in a sorted set with the first id the write was given. A retry of a
-- write whose reply was lost finds its key and writes nothing again.
local function dedupe_arg(value)
  if string.len(value) > MAX_DEDUPE_KEY then
    fail('INVALID', 'a dedupe key has at most ' .. MAX_DEDUPE_KEY .. ' bytes, got '
      .. string.len(value))
  end
  return value
end

-- Returns the first id the write with this key was given, or nil if it is not remembered.
local function dedupe_seen(key, token)
  if token == '' then
    return nil
  end
  local score = redis.call('ZSCORE', key, token)
  if score then
    return tonumber(score)
  end
  return nil
end

-- Remembers token for the write whose ids are first_id..last_id. Keys older than the window
-- are swept each time the ids cross a multiple of DEDUPE_SWEEP, one call in many.
-- The reply of an append or replace whose dedupe key was already remembered: the ids the
-- first call got (n messages from seen), the current totals, and duplicate = 1.
local function dedupe_reply(meta, seen, n)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'summary_tokens')
  return {seen, seen + n - 1, tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0, 1}
end

local function dedupe_record(key, token, first_id, last_id)
  if token == '' then
    return
  end
  redis.call('ZADD', key, first_id, token)
  if math.floor(last_id / DEDUPE_SWEEP) ~= math.floor((first_id - 1) / DEDUPE_SWEEP) then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (last_id - DEDUPE_WINDOW))
  end
end

local function totals(meta)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'last_id')
  return tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0
end
