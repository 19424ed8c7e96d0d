-- lib/args.lua: arguments: typed errors and checked numbers. Every script raises its errors as
-- 'COMPOZY_<CODE> <text>' before its first write (Redis has no rollback); the client maps
-- INVALID, TOOLARGE, CONFLICT, MOVED, STALE, OVERFLOW, CORRUPT (stored data that does not
-- decode: CorruptDataError) ... to typed exceptions (compozy_memory/_wire/translate.py).
-- USES: (none)

local function fail(code, text)
  error({err = 'COMPOZY_' .. code .. ' ' .. text})
end

-- Returns value as an integer in [min, max] (max nil = unbounded), or nil. (n % 1 is not 0
-- for a fraction, an infinity or NaN: an integer check without a call.)
local function int_or_nil(value, min, max)
  local n = tonumber(value)
  if n == nil or n % 1 ~= 0 or n < min or (max ~= nil and n > max) then
    return nil
  end
  return n
end

-- Returns text as an integer in [0, max] when it is written as the client writes one, in
-- decimal digits alone (no sign, no leading zero, no exponent), else nil: such text may go
-- into stored data as it is. Up to four digits (a priority, most token counts) are read from
-- their bytes, without a conversion (a call of tonumber costs about what a small command
-- does, a pattern more).
local function digits_or_nil(text, max)
  local a, b, c, d, e = string.byte(text, 1, 5)
  local n
  if a == 48 then
    n = b == nil and 0 or nil
  elseif a == nil or a < 49 or a > 57 then
    n = nil
  elseif e ~= nil then
    -- (past 16 digits no count is exact in a double: refused unread, whatever its length)
    n = #text <= 16 and not string.find(text, '%D') and tonumber(text) or nil
  else
    -- a, then b, c and d while there are bytes: each a digit
    n = a - 48
    if b ~= nil then
      n = b >= 48 and b <= 57 and n * 10 + b - 48 or nil
      if n ~= nil and c ~= nil then
        n = c >= 48 and c <= 57 and n * 10 + c - 48 or nil
        if n ~= nil and d ~= nil then
          n = d >= 48 and d <= 57 and n * 10 + d - 48 or nil
        end
      end
    end
  end
  if n ~= nil and n <= max then
    return n
  end
  return nil
end

local function int_arg(value, name, min, max)
  local n = int_or_nil(value, min, max)
  if n == nil then
    fail('INVALID', name .. ' must be an integer in [' .. min .. ', ' .. tostring(max or 'inf')
      .. '], got ' .. tostring(value))
  end
  return n
end

local function json_object_arg(body, what)
  if string.sub(body, 1, 2) ~= '{"' or string.sub(body, -1) ~= '}' then
    fail('INVALID', what .. ' must be a non-empty JSON object')
  end
end

local function split_tabs(text)
  local out = {}
  for field in string.gmatch(text, '[^\t]+') do
    out[#out + 1] = field
  end
  return out
end

-- Stored data may have been written raw by a tenant with the read-write ACL line (Redis checks
-- a function's commands against its caller's rules, so no line lets a user FCALL a function
-- that writes without letting it write: docs/operations.md). So a script sizes what it reads
-- by what is there, never by what stored data claims, and refuses what compozy-memory never
-- writes with COMPOZY_CORRUPT (CorruptDataError) before its first write.

-- Refuses, unread, a key (a list, hash or sorted set) whose bytes (MEMORY USAGE, counted over
-- all of it: no sample) are more than items of at most item_bytes each can take: a value
-- longer than any the scripts write was planted in it. items is the server's count of them
-- (LLEN, HLEN: a stored count is checked against it first). A missing key passes, as does any
-- key where MEMORY USAGE is not to be had (an ACL line from before this release, an emulator
-- without it): each value is then still checked as it is read.
local function sized(key, what, items, item_bytes)
  if items == 0 then
    return  -- the server's own count: a list, hash or set of none does not exist
  end
  local used = redis.pcall('MEMORY', 'USAGE', key, 'SAMPLES', 0)
  if type(used) == 'number' and used > items * (item_bytes + item_bytes / 2 + 128) + 16384 then
    fail('CORRUPT', what .. ' holds ' .. used .. ' bytes, more than ' .. items .. ' items of '
      .. 'at most ' .. item_bytes .. ' bytes take: it was written raw, not by compozy-memory')
  end
end

-- Returns value (text read from stored data, or false/nil), refusing one of more than most
-- bytes: its length is checked before anything parses or returns it.
local function bounded(value, most, what)
  if value and #value > most then
    fail('CORRUPT', what .. ' has ' .. #value .. ' bytes, more than the ' .. most
      .. ' compozy-memory writes: it was written raw')
  end
  return value
end
