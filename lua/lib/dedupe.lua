-- lib/dedupe.lua: idempotent writes: dedupe keys remembered per memory.
-- USES: args

-- Idempotent writes: append and replace carry a dedupe key (one the handle makes up per call
-- by default). A retry of a write whose reply was lost finds its key and writes nothing
-- again. A key is remembered while the last id its write was given is within DEDUPE_WINDOW
-- ids of the memory's newest (checked when the key is looked up, so the window is exact), and
-- what is kept for it is bounded.
local function dedupe_arg(value)
  if string.len(value) > MAX_DEDUPE_KEY then
    fail('INVALID', 'a dedupe key has at most ' .. MAX_DEDUPE_KEY .. ' bytes, got '
      .. string.len(value))
  end
  return value
end

-- A caller's own key is a member of the dedupe set, scored by its write's last id.
--
-- A key the handles make up themselves, '~<process>:<n>' (a random prefix per process and a
-- counter), is remembered in meta, as a process's writes to one memory are many and their
-- keys alike. Meta field 'w:<process>' is the process's record: '<hi>:<z>:<seq>:<k>', then its
-- newest k writes (',<n>:<last id>' each, in the order applied), where
--   hi   is the largest n recorded: a key above it is new (the first attempt of a write, the
--        usual case), and is recorded without a lookup;
--   z    is the score of the dedupe set's member '~<process>', moved up once the ids have gone
--        DEDUPE_SWEEP past it (the sweep gives such members that much more room);
--   seq  numbers the next sealed chunk: once a record holds DEDUPE_CHUNK writes, they go to
--        field 'w:<process>.<seq>' (scored in the set as '~<process>.<seq>' by its newest last
--        id), and a process keeps its DEDUPE_CHUNKS newest chunks.
-- So an append reads and writes a record of at most DEDUPE_CHUNK writes, a seal is a write of
-- one chunk every DEDUPE_CHUNK appends, and only a key at or below hi (a retry, or a write
-- that arrived after newer ones of its process) reads the sealed chunks. A record an earlier
-- release wrote (',<n>:<last id>...', no header) is searched whole, and gets a header on its
-- process's next write.

-- Refuses, unread, a process's record (meta field, or nil for none) longer than the scripts
-- write: it was written raw.
local function dedupe_sized(meta, field)
  if field and redis.call('HSTRLEN', meta, field) > MAX_META_FIELD_BYTES then
    fail('CORRUPT', 'meta field ' .. field .. ' is longer than a dedupe record compozy-memory '
      .. 'writes: it was written raw')
  end
end

-- A dedupe key as the scripts keep it: (own) for a caller's, (nil, process, n) for one the
-- handles made up, nothing for none. A counter written with leading zeros is not one a handle
-- makes: such a key is kept as a caller's, so the counters compare by their digits alone.
local function dedupe_token(token)
  if token == '' then
    return nil
  end
  local process, n = string.match(token, '^~([%w_%-]+):([1-9]%d*)$')
  if process == nil then
    process, n = string.match(token, '^~([%w_%-]+):(0)$')
    if process == nil then
      return token
    end
  end
  return nil, process, n
end

-- Whether counter a (digits, no leading zero) is a larger number than b, whatever their length.
local function digits_above(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end

-- A process's record read (record: meta's 'w:<process>', or nil): {hi, z (a number) and zt
-- (its text), seq (text), count (a number), from, text}, hi nil for an earlier release's
-- list; nil for no record. Only what an append computes with is converted from text.
local function dedupe_parse(record)
  if record == nil then
    return nil
  end
  local hi, z, seq, count, from = string.match(record, '^(%d+):(%d+):(%d+):(%d+)()')
  if hi == nil then
    return {z = 0, zt = '0', seq = '0', count = select(2, string.gsub(record, ',', ',')),
      from = 1, text = record}
  end
  return {hi = hi, z = tonumber(z), zt = z, seq = seq, count = tonumber(count), from = from,
    text = record}
end

-- The last id in text (',<n>:<last id>' entries from index from) recorded for n, or nil.
local function dedupe_find(text, n, from)
  local at = text and string.find(text, ',' .. n .. ':', from, true)
  if at then
    return tonumber(string.match(text, '^,%d+:(%d+)', at))
  end
  return nil
end

-- Returns the last id the write with this key (own, or process and n, as dedupe_token gave
-- them) was given, or nil if it is not remembered; and, for a process's key, its record
-- parsed (for dedupe_record). record: meta's 'w:<process>' (or nil); newest: meta's last id.
-- A record or chunk longer than any the scripts write (MAX_META_FIELD_BYTES) was written
-- raw: refused before anything parses it (this runs before the write's first command).
local function dedupe_seen(k, own, process, n, record, newest)
  local seen, r
  record = bounded(record, MAX_META_FIELD_BYTES, 'a dedupe record')
  if own ~= nil then
    seen = tonumber(redis.call('ZSCORE', k.dedupe, own))
  elseif process ~= nil then
    r = dedupe_parse(record)
    if r == nil or (r.hi ~= nil and digits_above(n, r.hi)) then
      return nil, r  -- above every key recorded: new
    end
    seen = dedupe_find(r.text, n, r.from)
    local seq = tonumber(r.seq)
    if seen == nil and seq > 0 then
      local fields = {}
      for s = seq - 1, math.max(0, seq - DEDUPE_CHUNKS), -1 do
        fields[#fields + 1] = 'w:' .. process .. '.' .. s
      end
      local chunks = redis.call('HMGET', k.meta, unpack(fields))
      for i = 1, #chunks do
        seen = seen or dedupe_find(bounded(chunks[i], MAX_META_FIELD_BYTES, 'a dedupe record')
          or nil, n, 1)
      end
    end
  end
  if seen ~= nil and seen >= newest - DEDUPE_WINDOW then
    return seen, r
  end
  return nil, r
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

-- Before members leave the dedupe set: drops the records of the processes among them.
local function dedupe_forget(meta, members)
  for _, member in ipairs(members) do
    if string.sub(member, 1, 1) == '~' then
      redis.call('HDEL', meta, 'w:' .. string.sub(member, 2))
    end
  end
end

-- Adds member to the dedupe set (score: a last id); returns whether that created the set.
-- The set never holds more than DEDUPE_WINDOW + DEDUPE_SWEEP members: past that, its lowest
-- go.
local function dedupe_add(k, score, member)
  if redis.call('ZADD', k.dedupe, score, member) == 0 then
    return false
  end
  local size = redis.call('ZCARD', k.dedupe)
  if size > DEDUPE_WINDOW + DEDUPE_SWEEP then
    dedupe_forget(k.meta, redis.call('ZRANGE', k.dedupe, 0, size - DEDUPE_WINDOW - 1))
    redis.call('ZREMRANGEBYRANK', k.dedupe, 0, size - DEDUPE_WINDOW - 1)
  end
  return size == 1
end

-- Remembers the key (own, or process and n) of the write whose ids are first_id..last_id
-- (last, if given: last_id as text); r: the process's record as dedupe_seen parsed it. Adds
-- the meta fields to set to out (field, value, ...: the write's one HSET), and returns whether
-- the dedupe set was created (so it is given the memory's deadline). Each time the ids cross a
-- multiple of DEDUPE_SWEEP, the members whose keys left the window are swept, a caller's key
-- at DEDUPE_WINDOW ids, a process's record or chunk DEDUPE_SWEEP ids later (their scores lag
-- by less than that). It runs after the write's RPUSH, so nothing a record holds may fail it:
-- one damaged or planted is read for what it is.
local function dedupe_record(k, own, process, n, r, first_id, last_id, out, last)
  local created = false
  -- The ids crossed a multiple of DEDUPE_SWEEP: the largest one up to last_id is in the write.
  if (own ~= nil or process ~= nil) and last_id - last_id % DEDUPE_SWEEP >= first_id then
    local gone, lagging = {}, last_id - DEDUPE_WINDOW - DEDUPE_SWEEP
    local old = redis.call('ZRANGE', k.dedupe, '-inf', '(' .. (last_id - DEDUPE_WINDOW),
      'BYSCORE', 'WITHSCORES')
    for i = 1, #old, 2 do
      if string.sub(old[i], 1, 1) ~= '~' or tonumber(old[i + 1]) < lagging then
        gone[#gone + 1] = old[i]
      end
    end
    if #gone > 0 then
      dedupe_forget(k.meta, gone)
      redis.call('ZREM', k.dedupe, unpack(gone))
    end
  end
  if own ~= nil then
    created = dedupe_add(k, last_id, own)
  elseif process ~= nil then
    local field, member = 'w:' .. process, '~' .. process
    local hi, z, zt, seq, count, list = n, 0, nil, '0', 0, ''
    if r ~= nil then
      z, zt, seq, count = r.z, r.zt, r.seq, r.count
      list = r.from > 1 and string.sub(r.text, r.from) or r.text
      if r.hi == nil then  -- an earlier release's list: its largest n becomes hi
        for seen in string.gmatch(list, ',(%d+):') do
          seen = string.match(seen, '^0*(%d.*)$')
          if digits_above(seen, hi) then
            hi = seen
          end
        end
      elseif not digits_above(n, r.hi) then
        hi = r.hi
      end
    end
    if count >= DEDUPE_CHUNK then
      -- Seal the list (unless all of it has left the window); the oldest chunk past
      -- DEDUPE_CHUNKS goes.
      local newest = tonumber(string.match(list, ':(%d+)$')) or 0  -- 0: not a list of ours
      if newest >= last_id - DEDUPE_WINDOW then
        out[#out + 1] = field .. '.' .. seq
        out[#out + 1] = list
        created = dedupe_add(k, newest, member .. '.' .. seq)
        local sealed = tonumber(seq)
        if sealed >= DEDUPE_CHUNKS then
          local dropped = string.format('%d', sealed - DEDUPE_CHUNKS)
          redis.call('HDEL', k.meta, field .. '.' .. dropped)
          redis.call('ZREM', k.dedupe, member .. '.' .. dropped)
        end
        seq = string.format('%d', sealed + 1)
      end
      count, list = 0, ''
    end
    if r == nil or last_id - z >= DEDUPE_SWEEP then
      z, zt = last_id, nil
      created = dedupe_add(k, z, member) or created
    end
    out[#out + 1] = field
    out[#out + 1] = hi .. ':' .. (zt or string.format('%d', z)) .. ':' .. seq .. ':'
      .. string.format('%d', count + 1) .. list .. ',' .. n .. ':'
      .. (last or string.format('%d', last_id))
  end
  return created
end
