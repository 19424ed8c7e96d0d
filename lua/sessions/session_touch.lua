#!lua
-- session_touch.lua: record writes to sessions (memories) in their project's session index,
-- one agent's sessions a call (the writes one process made in one event-loop tick).
-- USES: args clock
-- KEYS: sessions agent_sessions session_info
-- ARGV: agent entries...
--   agent     the agent writing ('' for none: then agent_sessions is not touched)
--   entries   one or more quintuples:
--     session   the memory's encoded key
--     last_id   the memory's last id after the write
--     messages  live messages after the write
--     tokens    live tokens after the write
--     age_ms    how long before this call the write was seen (the caller's clock measures
--               only this interval): its last-active time is the server's now minus it
-- REPLY: now_ms
-- The server's clock (ms) when the call ran.
-- sessions and agent_sessions are ZSETs of session -> last active ms; session_info is a HASH
-- of session -> 'created<TAB>last_active<TAB>last_id<TAB>messages<TAB>tokens<TAB>agent'.
-- Counts from an older state never replace newer ones (a retry or another replica's update
-- arriving late): messages arrive only with new ids, and leave (trim, flush, clear) without
-- changing last_id, so a greater last_id is newer, and at the same last_id fewer messages
-- (then fewer tokens) are. Last-active times never go back either.
local n = (#ARGV - ARGS_FROM + 1) / 5
if n < 1 or n ~= math.floor(n) or n > MAX_BATCH then
  fail('INVALID', 'entries are (session, last_id, messages, tokens, age_ms), 1 to '
    .. MAX_BATCH)
end
if #a_agent > MAX_SESSION_NAME_BYTES then
  fail('INVALID', 'an agent has at most ' .. MAX_SESSION_NAME_BYTES .. ' bytes')
end
local now = now_ms()
-- Every entry is checked, and what the index holds for it read (each sized first: an entry
-- longer than this script writes was written raw), before the first write.
local olds = {}
for i = ARGS_FROM, #ARGV, 5 do
  local session = ARGV[i]
  if #session == 0 or #session > MAX_SESSION_NAME_BYTES or string.find(session, '\t', 1, true) then
    fail('INVALID', 'a session is 1 to ' .. MAX_SESSION_NAME_BYTES .. ' bytes without tabs')
  end
  int_arg(ARGV[i + 1], 'last_id', 0, nil)
  int_arg(ARGV[i + 2], 'messages', 0, nil)
  int_arg(ARGV[i + 3], 'tokens', 0, nil)
  int_arg(ARGV[i + 4], 'age_ms', 0, MAX_SESSION_AGE_MS)
  if redis.call('HSTRLEN', k_session_info, session) > 2048 then
    fail('CORRUPT', 'the session index holds an entry longer than compozy-memory writes for '
      .. session .. ': it was written raw')
  end
  olds[i] = redis.call('HGET', k_session_info, session)
end
for i = ARGS_FROM, #ARGV, 5 do
  local session = ARGV[i]
  local last_id = tonumber(ARGV[i + 1])
  local messages = tonumber(ARGV[i + 2])
  local tokens = tonumber(ARGV[i + 3])
  local active = now - tonumber(ARGV[i + 4])
  local created, agent = active, a_agent
  local old = olds[i]
  if old then
    local f = split_tabs(old)
    created = tonumber(f[1]) or active
    active = math.max(active, tonumber(f[2]) or 0)
    local seen, seen_messages, seen_tokens = tonumber(f[3]) or -1, tonumber(f[4]) or 0,
      tonumber(f[5]) or 0
    if agent == '' then
      agent = f[6] or ''
    end
    local older = last_id < seen or (last_id == seen and (messages > seen_messages
      or (messages == seen_messages and tokens > seen_tokens)))
    if older then
      messages, tokens, last_id = seen_messages, seen_tokens, seen
    end
  end
  redis.call('HSET', k_session_info, session, string.format('%d\t%d\t%d\t%d\t%d\t', created,
    active, last_id, messages, tokens) .. agent)
  redis.call('ZADD', k_sessions, active, session)
  if a_agent ~= '' then
    redis.call('ZADD', k_agent_sessions, active, session)
  end
end
return now
