-- lib/meta.lua: reading a memory's meta: its data format, and the checks that the memory's
-- other keys are all there (none evicted or deleted) before a script uses them.
-- USES: args

-- Reads meta's fields (names) with one HMGET: a table of name -> value (text; nil when the
-- field is missing). A value longer than MAX_META_FIELD_BYTES was written raw: refused.
local function meta_read(meta, names)
  local values = redis.call('HMGET', meta, unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    local value = values[i]
    if value then
      if #value > MAX_META_FIELD_BYTES then  -- (the message is made only for the refusal)
        bounded(value, MAX_META_FIELD_BYTES, 'meta field ' .. name)
      end
      out[name] = value
    end
  end
  return out
end

-- Refuses, unread, a meta of more than MAX_META_FIELDS fields, or of more bytes than its
-- fields can take (MAX_META_FIELD_BYTES each): it was written raw.
local function meta_sized(meta)
  local n = redis.call('HLEN', meta)
  if n > MAX_META_FIELDS then
    fail('CORRUPT', 'meta has ' .. n .. ' fields, more than the ' .. MAX_META_FIELDS
      .. ' compozy-memory writes: it was written raw')
  end
  sized(meta, 'meta', n, MAX_META_FIELD_BYTES)
end

-- Every field of meta (HGETALL), sized first (meta_sized).
local function meta_all(meta)
  meta_sized(meta)
  return redis.call('HGETALL', meta)
end

-- DATA_FORMAT as meta's fmt holds it: a memory in this release's format passes check_format
-- with one comparison of text.
local FORMAT_TEXT = DATA_FORMAT .. ''  -- (a library's loading may call no function)

-- Refuses a memory written by a newer release, in a format this one cannot read (meta's fmt;
-- none: DATA_FORMAT 1, before it was named).
local function check_format(m)
  if m.fmt == FORMAT_TEXT then
    return
  end
  local fmt = tonumber(m.fmt) or 1
  if fmt > DATA_FORMAT then
    fail('FORMAT', 'this memory is in data format ' .. fmt .. ', written by a newer '
      .. 'compozy-memory; this release reads format ' .. DATA_FORMAT .. ' and older')
  end
end

-- A memory whose keys were partly evicted or deleted is refused, never rebuilt silently:
-- parts maps a part's name to {key, expected length or nil for 'must not exist'}.
local function check_parts(m, k, parts)
  if m.inc == nil then
    -- No meta: a new memory, unless another part of it is still there.
    local keys, names = {}, {}
    for name, part in pairs(parts) do
      keys[#keys + 1] = part[1]
      names[#names + 1] = name
    end
    if #keys > 0 and redis.call('EXISTS', unpack(keys)) > 0 then
      table.sort(names)
      fail('EVICTED', 'meta is gone but other keys of this memory (' .. table.concat(names, ', ')
        .. ') are not: they were evicted or deleted')
    end
    return
  end
  for name, part in pairs(parts) do
    local expected = part[2]
    if expected ~= nil then
      local found
      if part[3] == 'exists' then
        -- Documents (or vectors) counted: the key is there (none counted: nothing to check).
        found = expected > 0 and redis.call('EXISTS', part[1]) or 0
        expected = expected > 0 and 1 or 0
      else
        found = redis.call('LLEN', part[1])
      end
      if found ~= expected then
        fail('EVICTED', name .. ' holds ' .. found .. ' where meta says ' .. expected
          .. ': keys of this memory were evicted or deleted')
      end
    end
  end
end

-- Session facts are two keys that always hold the same keys (the values, and their order):
-- one without the other was evicted or deleted. More than MAX_FACTS were written raw; and a
-- script that reads them (reading) has both keys sized first.
local function check_facts(k_facts, k_factord, reading)
  local values, order = redis.call('HLEN', k_facts), redis.call('ZCARD', k_factord)
  if values ~= order then
    fail('EVICTED', 'the facts hold ' .. values .. ' values and ' .. order .. ' keys in order: '
      .. 'keys of this memory were evicted or deleted')
  end
  if values > MAX_FACTS then
    fail('CORRUPT', 'the memory holds ' .. values .. ' facts, more than the ' .. MAX_FACTS
      .. ' compozy-memory keeps: they were written raw')
  end
  if reading then
    sized(k_facts, 'the facts', values, MAX_FACT_KEY + MAX_FACT_VALUE + 32)
    sized(k_factord, 'the order of the facts', values, MAX_FACT_KEY + 32)
  end
end

-- The parts of a memory its meta accounts for, with what meta says they hold.
local function counted_parts(m, k, which)
  local parts = {}
  local fmt = tonumber(m.fmt) or 1
  for _, name in ipairs(which) do
    if name == 'msgs' then
      parts.msgs = {k.msgs, tonumber(m.count) or 0}
    elseif name == 'archive' then
      parts.archive = {k.archive, (tonumber(m.archived) or 0) - (tonumber(m.archive_base) or 0)}
    elseif name == 'summaries' then
      -- Counted since format 2 (an import of format 1 did not count them); never more than
      -- MAX_SUMMARIES, so a script may read them all.
      local n = tonumber(m.summary_count) or 0
      if n > MAX_SUMMARIES then
        fail('CORRUPT', 'meta counts ' .. n .. ' summaries, more than the ' .. MAX_SUMMARIES
          .. ' a memory holds: it was written raw')
      end
      parts.summaries = {k.summaries, fmt >= 2 and n or nil}
    elseif name == 'index' then
      parts.index = {k.ixdocs, fmt >= 2 and (tonumber(m.ix_docs) or 0) or nil, 'exists'}
      -- Segments listed: the HASH holding them is there (format 3 on), where the script
      -- declares it.
      if k.ixseg then
        parts.segments = {k.ixseg, fmt >= 3 and (tonumber(m.ix_nseg) or 0) or nil, 'exists'}
      end
    elseif name == 'ixgone' then
      parts.ixgone = {k.ixgone, fmt >= 2 and (tonumber(m.ix_gone) or 0) or nil}
    elseif name == 'vectors' then
      -- Vectors counted: the HASH is there (lib/vectors.lua).
      parts.vectors = {k.ixvec, tonumber(m.vx_count) or 0, 'exists'}
    end
  end
  return parts
end

-- The fields every guarded read of meta takes.
local GUARD_FIELDS = {'inc', 'fmt', 'imp', 'count', 'archived', 'archive_base',
  'summary_count', 'ix_docs', 'ix_gone', 'ix_nseg', 'ix_off', 'vx_count'}

-- The id below which every message is indexed (meta's ix_next), as the scripts that move
-- messages to the archive check it: a memory whose search is off (ix_off, index_reset.lua)
-- keeps no index, and moves any message.
local function index_next(m)
  if m.ix_off then
    return math.huge
  end
  return tonumber(m.ix_next) or 0
end

-- Refuses a write while an import fills the memory (import.lua).
local function check_not_importing(m)
  if m.imp then
    fail('CONFLICT', 'an import is writing this memory (clear() one that was cut short)')
  end
end

-- Reads meta (GUARD_FIELDS and extra), sized first (a meta of more bytes than its fields can
-- take was written raw: refused unread), and checks the format and the parts in which; a
-- writing caller is also refused while an import fills the memory.
local function guarded(k, which, extra, writing)
  local names = {unpack(GUARD_FIELDS)}
  for _, name in ipairs(extra or {}) do
    names[#names + 1] = name
  end
  meta_sized(k.meta)
  local m = meta_read(k.meta, names)
  check_format(m)
  check_parts(m, k, counted_parts(m, k, which))
  if writing then
    check_not_importing(m)
  end
  return m
end

-- The memory's version as reported and compared: meta's 'ver' (lib/batch.lua), or, for a
-- memory no write of this release has named yet, '<last_id>:' (a version no write makes).
local function version_of(m)
  return m.ver or (string.format('%d', tonumber(m.last_id) or 0) .. ':')
end

local function totals(meta)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'last_id')
  return tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0
end

