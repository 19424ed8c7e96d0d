-- lib/deltas.lua: changing a memory's meta: exact totals through deltas, its incarnation (set
-- from the server clock when meta is created, so a memory that expired and was written again
-- is told apart from the old one), and the TTL every write sets.
-- USES: clock

-- Meta changes are gathered in a table of field -> delta and written with one HMGET and one
-- HSET, whatever the number of messages and priorities involved.
local function new_deltas()
  return {tokens = 0, count = 0}
end

-- Accounts count messages (1 when nil) of priority that hold tokens in all.
local function account(deltas, sign, tokens, priority, count)
  count = count or 1
  local pt = 'p:' .. priority .. ':tokens'
  local pc = 'p:' .. priority .. ':count'
  deltas.tokens = deltas.tokens + sign * tokens
  deltas.count = deltas.count + sign * count
  deltas[pt] = (deltas[pt] or 0) + sign * tokens
  deltas[pc] = (deltas[pc] or 0) + sign * count
end

-- Applies deltas to meta; returns the new values by field, and 'inc', the incarnation (a
-- meta created here gets a new one, in this release's format). check(before), if given,
-- sees meta's values before (the delta fields, inc, fmt, imp) and may fail: nothing is written
-- then. extra(values), if given, returns more fields to set in the same HSET (a table of
-- field, value, ...), from the new values.
local function apply_deltas(meta, deltas, check, extra)
  local fields = {'inc', 'fmt', 'imp'}
  for field in pairs(deltas) do
    fields[#fields + 1] = field
  end
  local current = redis.call('HMGET', meta, unpack(fields))
  if check then
    local before = {}
    for i, field in ipairs(fields) do
      before[field] = current[i] or nil  -- a missing field comes as false
    end
    check(before)
  end
  local updates, values = {}, {}
  for i = 4, #fields do
    local field = fields[i]
    local value = (tonumber(current[i]) or 0) + deltas[field]
    values[field] = value
    updates[#updates + 1] = field
    updates[#updates + 1] = string.format('%d', value)
  end
  values.inc = current[1]
  if not values.inc then
    values.inc = string.format('%d', now_us())
    updates[#updates + 1] = 'inc'
    updates[#updates + 1] = values.inc
    updates[#updates + 1] = 'fmt'
    updates[#updates + 1] = DATA_FORMAT
  end
  if extra then
    for _, item in ipairs(extra(values)) do
      updates[#updates + 1] = item
    end
  end
  redis.call('HSET', meta, unpack(updates))
  return values
end

-- The memory's incarnation, creating meta with one if it does not exist yet.
local function incarnation(meta)
  local inc = redis.call('HGET', meta, 'inc')
  if not inc then
    inc = string.format('%d', now_us())
    redis.call('HSET', meta, 'inc', inc, 'fmt', DATA_FORMAT)
  end
  return inc
end

-- Sets the instance TTL on every key in keys (PEXPIRE on a missing key is a no-op).
local function apply_ttl(keys, ttl_ms)
  if ttl_ms > 0 then
    for i = 1, #keys do
      redis.call('PEXPIRE', keys[i], ttl_ms)
    end
  end
end
