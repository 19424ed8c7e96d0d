-- lib/envelope.lua: envelopes: a stored message starts with '{"id":N,"ts":T,"tokens":K,"priority":P,'
-- so a script reads those four fields with one pattern match, without decoding JSON.
-- USES: args

local ENVELOPE_HEAD = '^{"id":(%d+),"ts":%d+,"tokens":(%d+),"priority":(%d+),'

-- An envelope: the fields the script checked, then the caller's body without its '{'.
local function envelope(id, ts, tokens, priority, body)
  return string.format('{"id":%d,"ts":%d,"tokens":%d,"priority":%d,', id, ts, tokens,
    priority) .. string.sub(body, 2)
end

-- The same envelope from text: id and ts as digits, tokens and priority as the client wrote
-- them (digits: lib/args.lua, digits_or_nil), and rest, the body after its '{', so the
-- envelope is one concatenation, with no number formatted and no copy of the body cut.
local function envelope_text(id, ts, tokens, priority, rest)
  return '{"id":' .. id .. ',"ts":' .. ts .. ',"tokens":' .. tokens .. ',"priority":' .. priority
    .. ',' .. rest
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

-- An envelope's id and priority, as envelope_head gives them, for a loop over many that needs
-- no token count: one conversion fewer, and a priority of a few digits read from its bytes.
local ENVELOPE_ID_PRIORITY = '^{"id":(%d+),"ts":%d+,"tokens":%d+,"priority":(%d+),'
local function envelope_id_priority(env)
  local id, priority = string.match(env, ENVELOPE_ID_PRIORITY)
  if id == nil then
    return envelope_head(env)  -- refused there, with its message
  end
  return tonumber(id), digits_or_nil(priority, MAX_PRIORITY) or tonumber(priority)
end

-- Envelopes first..last of list key (LRANGE indices), each refused (COMPOZY_CORRUPT) when
-- longer than any envelope the scripts write (MAX_ENVELOPE_BYTES: one written raw). With
-- items (how many the list holds) the list is sized first, as a whole (lib/args.lua: sized).
local function envelopes_read(key, what, first, last, items)
  if items then
    sized(key, what, items, MAX_ENVELOPE_BYTES)
  end
  local out = redis.call('LRANGE', key, first, last)
  for i = 1, #out do
    bounded(out[i], MAX_ENVELOPE_BYTES, what)
  end
  return out
end

-- How many summaries the memory holds (k.summaries): at most MAX_SUMMARIES, the list sized
-- before any of them is read (summary_at reads one).
local function summaries_count(k)
  local n = redis.call('LLEN', k.summaries)
  if n > MAX_SUMMARIES then
    fail('CORRUPT', 'the memory holds ' .. n .. ' summaries, more than the ' .. MAX_SUMMARIES
      .. ' compozy-memory keeps: they were written raw')
  end
  sized(k.summaries, 'a summary', n, MAX_ENVELOPE_BYTES)
  return n
end

-- Summary i (LINDEX index) of a list summaries_count sized, bounded, or false.
local function summary_at(k, i)
  return bounded(redis.call('LINDEX', k.summaries, i) or false, MAX_ENVELOPE_BYTES, 'a summary')
end

-- Every summary of the memory (k.summaries), oldest first: at most MAX_SUMMARIES, sized
-- before they are read.
local function summaries_read(k)
  local n = summaries_count(k)
  if n == 0 then
    return {}
  end
  return envelopes_read(k.summaries, 'a summary', 0, -1)
end
