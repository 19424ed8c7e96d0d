#!lua
-- sessions_forget.lua: drop one session (a memory that was purged) from its project's
-- session index.
-- USES: (none)
-- KEYS: sessions agent_sessions session_info
-- ARGV: session
--   session  the memory's encoded key
-- REPLY: forgotten
-- 1 when the index held the session, 0 when not. agent_sessions is the index of the agent
-- the session's entry names (the caller read it); an entry naming another agent leaves its
-- member there without an entry, which listing passes over (lua/sessions/sessions_list.lua).
local forgotten = redis.call('HDEL', k_session_info, a_session)
redis.call('ZREM', k_sessions, a_session)
redis.call('ZREM', k_agent_sessions, a_session)
return forgotten
