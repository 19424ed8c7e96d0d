-- lib/envelope.lua: envelopes: a stored message starts with '{"id":N,"ts":T,"tokens":K,"priority":P,'
-- so a script reads those four fields with one pattern match, without decoding JSON.
-- USES: args

local ENVELOPE_HEAD = '^{"id":(%d+),"ts":%d+,"tokens":(%d+),"priority":(%d+),'

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
