#!lua flags=no-writes
-- sessions_list.lua: a page of a session index, most recently active first.
-- USES: args
-- KEYS: sessions session_info
-- ARGV: limit before_score before_session
--   limit           sessions per page, 1..MAX_SESSIONS_PAGE
--   before_score    '' for the first page, else the cursor: the last-active time of the
--                   last session of the previous page...
--   before_session  ...and its key; the page starts right after it
-- REPLY: {sessions...}
-- A flat list of session, info pairs (info as session_touch.lua writes it); KEYS'
-- sessions may be the project's index or one agent's.
local limit = int_arg(a_limit, 'limit', 1, MAX_SESSIONS_PAGE)
local max = '+inf'
if a_before_score ~= '' then
  max = tostring(int_arg(a_before_score, 'before_score', 0, nil))
end
local out = {}
local skip = 0
-- At most about limit + MAX_READ sessions are looked at: ties on the cursor's time and
-- sessions whose info is gone are skipped, boundedly; a short page says so by its length.
while #out < 2 * limit and skip < limit + MAX_READ do
  local page = redis.call('ZRANGE', k_sessions, max, '-inf', 'BYSCORE', 'REV', 'WITHSCORES',
    'LIMIT', skip, limit + 1)
  if #page == 0 then
    break
  end
  for i = 1, #page, 2 do
    local member, score = page[i], page[i + 1]
    skip = skip + 1
    -- Equal scores come in reverse lexicographic order: those not below the cursor's key
    -- were on earlier pages.
    local after = a_before_score == '' or tonumber(score) < tonumber(a_before_score)
      or member < a_before_session
    if after and #out < 2 * limit then
      local info = bounded(redis.call('HGET', k_session_info, member), 2048,
        'an entry of the session index')
      if info then
        out[#out + 1] = member
        out[#out + 1] = info
      end
    end
  end
end
return out
