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
local MAX_PRIORITY = 99
local ENVELOPE_HEAD = '^{"id":(%d+),"ts":%d+,"tokens":(%d+),"priority":(%d+),'

local function fail(code, text)
  error({err = 'COMPOZY_' .. code .. ' ' .. text})
end

local function int_arg(value, name, min, max)
  local n = tonumber(value)
  if n == nil or n ~= math.floor(n) or n < min or (max ~= nil and n > max) then
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

-- Checks n message triples (tokens, priority, body) starting at ARGV[first].
local function validate_batch(first, n, max_tokens)
  if #ARGV ~= first - 1 + 3 * n then
    fail('INVALID', 'expected ' .. n .. ' message triples, got ' .. (#ARGV - first + 1)
      .. ' arguments')
  end
  for i = 0, n - 1 do
    local at = first + 3 * i
    local tokens = int_arg(ARGV[at], 'message ' .. (i + 1) .. ' tokens', 0, nil)
    if max_tokens > 0 and tokens > max_tokens then
      fail('TOOLARGE', 'message ' .. (i + 1) .. ' has ' .. tokens
        .. ' tokens, more than the memory limit of ' .. max_tokens)
    end
    int_arg(ARGV[at + 1], 'message ' .. (i + 1) .. ' priority', 0, MAX_PRIORITY)
    local body = ARGV[at + 2]
    if string.sub(body, 1, 2) ~= '{"' or string.sub(body, -1) ~= '}' then
      fail('INVALID', 'message ' .. (i + 1) .. ' body must be a non-empty JSON object')
    end
  end
end

-- Adds (sign = 1) or removes (sign = -1) one message's count and tokens in meta.
local function account(meta, sign, tokens, priority)
  redis.call('HINCRBY', meta, 'tokens', sign * tokens)
  redis.call('HINCRBY', meta, 'count', sign)
  redis.call('HINCRBY', meta, 'p:' .. priority .. ':tokens', sign * tokens)
  redis.call('HINCRBY', meta, 'p:' .. priority .. ':count', sign)
end

-- Pushes n validated triples starting at ARGV[first]; returns first_id, last_id.
local function push_batch(msgs, meta, first, n)
  local now = redis.call('TIME')
  local ts = string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
  local last_id = redis.call('HINCRBY', meta, 'last_id', n)
  local first_id = last_id - n + 1
  local envelopes = {}
  for i = 0, n - 1 do
    local at = first + 3 * i
    local tokens, priority = ARGV[at], ARGV[at + 1]
    envelopes[#envelopes + 1] = string.format('{"id":%d,"ts":%s,"tokens":%s,"priority":%s,',
      first_id + i, ts, tokens, priority) .. string.sub(ARGV[at + 2], 2)
    account(meta, 1, tonumber(tokens), tonumber(priority))
    if #envelopes == 512 then
      redis.call('RPUSH', msgs, unpack(envelopes))
      envelopes = {}
    end
  end
  if #envelopes > 0 then
    redis.call('RPUSH', msgs, unpack(envelopes))
  end
  return first_id, last_id
end

-- Appends envelopes to the capped archive.
local function archive(archive_key, meta, envelopes, archive_max)
  for i = 1, #envelopes, 512 do
    redis.call('RPUSH', archive_key, unpack(envelopes, i, math.min(i + 511, #envelopes)))
  end
  redis.call('HINCRBY', meta, 'archived', #envelopes)
  if archive_max > 0 then
    redis.call('LTRIM', archive_key, -archive_max, -1)
  end
end

-- Sets the instance TTL on every data key that exists (PEXPIRE on a missing key is a no-op).
local function apply_ttl(ttl_ms)
  if ttl_ms > 0 then
    for i = 1, #KEYS do
      redis.call('PEXPIRE', KEYS[i], ttl_ms)
    end
  end
end

local function totals(meta)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'last_id')
  return tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0
end
