-- lib/dedupe.lua: idempotent writes: dedupe keys remembered per memory.
-- USES: args

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

-- A key the handles make up themselves, '~<process>:<n>' (a random prefix per process and a
-- counter), is remembered compactly, as the process's writes to this memory are many and its
-- keys alike: meta field 'w:<process>' lists ',n:last_id' per write in the order the writes
-- were applied (so by last_id), and the dedupe set holds one member '~<process>' scored by
-- its newest write, so the sweep below forgets a quiet process's list with the rest. A
-- caller's own key is a member of the dedupe set itself.
local function made_up(token)
  return string.match(token, '^~([%w_%-]+):(%d+)$')
end

-- Returns the last id the write with this key was given, or nil if it is not remembered.
local function dedupe_seen(meta, key, token)
  if token == '' then
    return nil
  end
  local process, n = made_up(token)
  if process then
    local list = redis.call('HGET', meta, 'w:' .. process)
    local at = list and string.find(list, ',' .. n .. ':', 1, true)
    if at then
      return tonumber(string.match(list, '^,%d+:(%d+)', at))
    end
    return nil
  end
  local score = redis.call('ZSCORE', key, token)
  if score then
    return tonumber(score)
  end
  return nil
end

-- The reply of an append or replace whose dedupe key was already remembered: the ids the
-- first call got (n messages ending at last), the current totals, duplicate = 1, the
-- incarnation and the current version.
local function dedupe_reply(meta, last, n)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'summary_tokens', 'inc', 'ver',
    'last_id')
  return {last - n + 1, last, tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0, 1,
    t[4] or '', t[5] or (string.format('%d', tonumber(t[6]) or 0) .. ':')}
end

-- Before members leave the dedupe set: drops the lists of the processes among them.
local function dedupe_forget(meta, members)
  for _, member in ipairs(members) do
    if string.sub(member, 1, 1) == '~' then
      redis.call('HDEL', meta, 'w:' .. string.sub(member, 2))
    end
  end
end

-- Remembers token for the write whose last id is last_id. Keys whose write ended more than
-- DEDUPE_WINDOW ids ago are forgotten: a process's list loses them at its front as it writes,
-- and the set is swept each time the ids cross a multiple of DEDUPE_SWEEP; the set never
-- holds more than DEDUPE_WINDOW + DEDUPE_SWEEP members, even for writes that add no ids
-- (replace with no messages).
local function dedupe_record(meta, key, token, first_id, last_id)
  if token == '' then
    return
  end
  local process, n = made_up(token)
  if process then
    local field = 'w:' .. process
    local list = (redis.call('HGET', meta, field) or '') .. ',' .. n .. ':' .. last_id
    local from, cut = 1, last_id - DEDUPE_WINDOW
    while true do
      local old, stop = string.match(list, '^,%d+:(%d+)()', from)
      if old == nil or tonumber(old) >= cut then
        break
      end
      from = stop
    end
    redis.call('HSET', meta, field, string.sub(list, from))
    redis.call('ZADD', key, last_id, '~' .. process)
  else
    redis.call('ZADD', key, last_id, token)
  end
  if math.floor(last_id / DEDUPE_SWEEP) ~= math.floor((first_id - 1) / DEDUPE_SWEEP) then
    local cut = '(' .. (last_id - DEDUPE_WINDOW)
    dedupe_forget(meta, redis.call('ZRANGE', key, '-inf', cut, 'BYSCORE'))
    redis.call('ZREMRANGEBYSCORE', key, '-inf', cut)
  end
  local size = redis.call('ZCARD', key)
  if size > DEDUPE_WINDOW + DEDUPE_SWEEP then
    dedupe_forget(meta, redis.call('ZRANGE', key, 0, size - DEDUPE_WINDOW - 1))
    redis.call('ZREMRANGEBYRANK', key, 0, size - DEDUPE_WINDOW - 1)
  end
end
