#!lua
-- session_touch.lua: record writes to sessions (memories) in their project's session index,
-- USES: args clock
-- one agent's sessions a call (the writes one process made in one event-loop tick).
-- KEYS: sessions agent_sessions session_info
-- ARGV: agent entries...
--   agent     the agent writing ('' for none: then agent_sessions is not touched)
--   entries   one or more quadruples:
--     session   the memory's encoded key
--     last_id   the memory's last id after the write
--     messages  live messages after the write
--     tokens    live tokens after the write
-- Returns: the sessions' last-active time (server clock, ms).
-- sessions and agent_sessions are ZSETs of session -> last active ms; session_info is a HASH
-- of session -> 'created<TAB>last_active<TAB>last_id<TAB>messages<TAB>tokens<TAB>agent'.
-- Counts from an older state never replace newer ones (a retry or another replica's update
-- arriving late): messages arrive only with new ids, and leave (trim, flush, clear) without
-- changing last_id, so a greater last_id is newer, and at the same last_id fewer messages
-- (then fewer tokens) are.
local n = (#ARGV - ARGS_FROM + 1) / 4
if n < 1 or n ~= math.floor(n) then
  fail('INVALID', 'entries are (session, last_id, messages, tokens) quadruples, at least one')
end
local now = now_ms()
for i = ARGS_FROM, #ARGV, 4 do
  local session = ARGV[i]
  local last_id = int_arg(ARGV[i + 1], 'last_id', 0, nil)
  local messages = int_arg(ARGV[i + 2], 'messages', 0, nil)
  local tokens = int_arg(ARGV[i + 3], 'tokens', 0, nil)
  if #session == 0 or #session > 1024 or string.find(session, '\t', 1, true) then
    fail('INVALID', 'a session is 1 to 1024 bytes without tabs')
  end
  local created, agent = now, a_agent
  local old = redis.call('HGET', k_session_info, session)
  if old then
    local f = split_tabs(old)
    created = tonumber(f[1]) or now
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
    now, last_id, messages, tokens) .. agent)
  redis.call('ZADD', k_sessions, now, session)
  if a_agent ~= '' then
    redis.call('ZADD', k_agent_sessions, now, session)
  end
end
return now
