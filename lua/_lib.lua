-- _lib.lua: helpers every script shares. The loader (compozy_memory/_wire/scripts.py) puts,
-- at the top of each script: the limits from compozy_memory/_model/limits.py as
-- 'local NAME = value' lines, then this file, then locals for the script's declared KEYS
-- ('k_<name>') and ARGV ('a_<name>', and ARGS_FROM: the index of the first variadic
-- argument). Helpers never read KEYS or ARGV themselves: they take what they need, so the
-- same code runs as an EVAL script and inside a Redis Functions library.
--
-- Conventions shared by all scripts:
--   Keys of a memory are always declared in one order: msgs meta archive summaries dedupe
--   lock (each script names the ones it touches, in that order).
--   Errors are raised as 'COMPOZY_<CODE> <text>' before the first write; the client maps
--   INVALID, TOOLARGE, CONFLICT and STALE to typed exceptions (CORRUPT is a ScriptError).
--   An envelope starts with '{"id":N,"ts":T,"tokens":K,"priority":P,' so a script reads
--   those four fields with one pattern match, without decoding JSON.
--   meta's 'inc' is the memory's incarnation: set from the server clock when meta is
--   created, so a memory that expired and was written again is told apart from the old one.

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

-- The server clock in milliseconds.
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- The server clock in microseconds: a new incarnation's id.
local function now_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- An envelope: the fields the script checked, then the caller's body without its '{'.
local function envelope(id, ts, tokens, priority, body)
  return string.format('{"id":%d,"ts":%d,"tokens":%d,"priority":%d,', id, ts, tokens,
    priority) .. string.sub(body, 2)
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

-- Replaces the first `scanned` messages of list `key` with `kept` (oldest first).
local function rewrite_head(key, scanned, kept)
  redis.call('LTRIM', key, scanned, -1)
  for i = #kept, 1, -1 do
    redis.call('LPUSH', key, kept[i])
  end
end

local function json_object_arg(body, what)
  if string.sub(body, 1, 2) ~= '{"' or string.sub(body, -1) ~= '}' then
    fail('INVALID', what .. ' must be a non-empty JSON object')
  end
end

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

-- Applies deltas to meta; returns the new values by field, and 'inc', the incarnation (a
-- meta created here gets a new one).
local function apply_deltas(meta, deltas)
  local fields = {'inc'}
  for field in pairs(deltas) do
    fields[#fields + 1] = field
  end
  local current = redis.call('HMGET', meta, unpack(fields))
  local updates, values = {}, {}
  for i = 2, #fields do
    local field = fields[i]
    local value = (tonumber(current[i]) or 0) + deltas[field]
    values[field] = value
    updates[#updates + 1] = field
    updates[#updates + 1] = string.format('%d', value)
  end
  values.inc = current[1]
  if not values.inc then
    values.inc = string.format('%d', now_us())
    updates[#updates + 1] = 'inc'
    updates[#updates + 1] = values.inc
  end
  redis.call('HSET', meta, unpack(updates))
  return values
end

-- The memory's incarnation, creating meta with one if it does not exist yet.
local function incarnation(meta)
  local inc = redis.call('HGET', meta, 'inc')
  if not inc then
    inc = string.format('%d', now_us())
    redis.call('HSET', meta, 'inc', inc)
  end
  return inc
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

-- Appends envelopes to the capped archive (the caller counts them in meta's 'archived').
local function archive(archive_key, envelopes, archive_max)
  for i = 1, #envelopes, 512 do
    redis.call('RPUSH', archive_key, unpack(envelopes, i, math.min(i + 511, #envelopes)))
  end
  if archive_max > 0 then
    redis.call('LTRIM', archive_key, -archive_max, -1)
  end
end

-- Sets the instance TTL on every key in keys (PEXPIRE on a missing key is a no-op).
local function apply_ttl(keys, ttl_ms)
  if ttl_ms > 0 then
    for i = 1, #keys do
      redis.call('PEXPIRE', keys[i], ttl_ms)
    end
  end
end

-- Idempotent writes: append and replace carry a dedupe key (a random one per call by
-- default), remembered in a sorted set scored by the last id the write was given. A retry
-- of a write whose reply was lost finds its key and writes nothing again.
local function dedupe_arg(value)
  if string.len(value) > MAX_DEDUPE_KEY then
    fail('INVALID', 'a dedupe key has at most ' .. MAX_DEDUPE_KEY .. ' bytes, got '
      .. string.len(value))
  end
  return value
end

-- Returns the last id the write with this key was given, or nil if it is not remembered.
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

-- The reply of an append or replace whose dedupe key was already remembered: the ids the
-- first call got (n messages ending at last), the current totals, and duplicate = 1.
local function dedupe_reply(meta, last, n)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'summary_tokens', 'inc')
  return {last - n + 1, last, tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0, 1,
    t[4] or ''}
end

-- Remembers token for the write whose last id is last_id. Keys whose write ended more than
-- DEDUPE_WINDOW ids ago are swept each time the ids cross a multiple of DEDUPE_SWEEP; the
-- set never holds more than DEDUPE_WINDOW + DEDUPE_SWEEP keys, even for writes that add no
-- ids (replace with no messages).
local function dedupe_record(key, token, first_id, last_id)
  if token == '' then
    return
  end
  redis.call('ZADD', key, last_id, token)
  if math.floor(last_id / DEDUPE_SWEEP) ~= math.floor((first_id - 1) / DEDUPE_SWEEP) then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (last_id - DEDUPE_WINDOW))
  end
  local size = redis.call('ZCARD', key)
  if size > DEDUPE_WINDOW + DEDUPE_SWEEP then
    redis.call('ZREMRANGEBYRANK', key, 0, size - DEDUPE_WINDOW - 1)
  end
end

local function totals(meta)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'last_id')
  return tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0
end
