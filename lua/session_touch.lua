#!lua
-- session_touch.lua: record a write to a session (a memory) in its project's session index.
-- USES: args clock
-- KEYS: sessions agent_sessions session_info
-- ARGV: session agent last_id messages tokens
--   session   the memory's encoded key
--   agent     the agent writing ('' for none: then agent_sessions is not touched)
--   last_id   the memory's last id after the write: counts from an older write (a retry
--             arriving late) never replace newer ones
--   messages  live messages after the write
--   tokens    live tokens after the write
-- REPLY: active_ms
-- The session's last-active time (server clock, ms).
-- sessions and agent_sessions are ZSETs of session -> last active ms; session_info is a HASH
-- of session -> 'created<TAB>last_active<TAB>last_id<TAB>messages<TAB>tokens<TAB>agent'.
local last_id = int_arg(a_last_id, 'last_id', 0, nil)
local messages = int_arg(a_messages, 'messages', 0, nil)
local tokens = int_arg(a_tokens, 'tokens', 0, nil)
if #a_session == 0 or #a_session > 1024 or string.find(a_session, '\t', 1, true) then
  fail('INVALID', 'a session is 1 to 1024 bytes without tabs')
end
local now = now_ms()
local created, seen, agent = now, -1, a_agent
local old = redis.call('HGET', k_session_info, a_session)
if old then
  local f = split_tabs(old)
  created, seen = tonumber(f[1]) or now, tonumber(f[3]) or -1
  if agent == '' then
    agent = f[6] or ''
  end
  if last_id < seen then
    messages, tokens, last_id = tonumber(f[4]) or 0, tonumber(f[5]) or 0, seen
  end
end
redis.call('HSET', k_session_info, a_session, string.format('%d\t%d\t%d\t%d\t%d\t', created,
  now, last_id, messages, tokens) .. agent)
redis.call('ZADD', k_sessions, now, a_session)
if a_agent ~= '' then
  redis.call('ZADD', k_agent_sessions, now, a_session)
end
return now
