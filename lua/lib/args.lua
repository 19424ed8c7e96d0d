-- lib/args.lua: arguments: typed errors and checked numbers. Every script raises its errors as
-- 'COMPOZY_<CODE> <text>' before its first write (Redis has no rollback); the client maps
-- INVALID, TOOLARGE, CONFLICT, MOVED, STALE, OVERFLOW, CORRUPT (stored data that does not
-- decode: CorruptDataError) ... to typed exceptions (compozy_memory/_wire/translate.py).
-- USES: (none)

local function fail(code, text)
  error({err = 'COMPOZY_' .. code .. ' ' .. text})
end

-- Returns value as an integer in [min, max] (max nil = unbounded), or nil.
local function int_or_nil(value, min, max)
  local n = tonumber(value)
  if n == nil or n ~= math.floor(n) or n < min or (max ~= nil and n > max) then
    return nil
  end
  return n
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
