-- lib/meta.lua: meta: a memory's exact totals, changed through deltas, and its incarnation (set from
-- the server clock when meta is created, so a memory that expired and was written again is
-- told apart from the old one); the TTL every write sets.
-- USES: clock

-- Meta changes are gathered in a table of field -> delta and written with one HMGET and one
-- HSET, whatever the number of messages and priorities involved.
local function new_deltas()
  return {tokens = 0, count = 0}
end

local function account(deltas, sign, tokens, priority)
  local pt = 'p:' .. priority .. ':tokens'
  local pc = 'p:' .. priority .. ':count'
  deltas.tokens = deltas.tokens + sign * tokens
  deltas.count = deltas.count + sign
  deltas[pt] = (deltas[pt] or 0) + sign * tokens
  deltas[pc] = (deltas[pc] or 0) + sign
end

-- Applies deltas to meta; returns the new values by field, and 'inc', the incarnation (a
-- meta created here gets a new one).
local function apply_deltas(meta, deltas)
  local fields = {'inc'}
  for field in pairs(deltas) do
    fields[#fields + 1] = field
  end
  local current = redis.call('HMGET', meta, unpack(fields))
  local updates, values = {}, {}
  for i = 2, #fields do
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
  end
  redis.call('HSET', meta, unpack(updates))
  return values
end

-- The memory's incarnation, creating meta with one if it does not exist yet.
local function incarnation(meta)
  local inc = redis.call('HGET', meta, 'inc')
  if not inc then
    inc = string.format('%d', now_us())
    redis.call('HSET', meta, 'inc', inc)
  end
  return inc
end

local function totals(meta)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'last_id')
  return tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0
end

-- Sets the instance TTL on every key in keys (PEXPIRE on a missing key is a no-op).
local function apply_ttl(keys, ttl_ms)
  if ttl_ms > 0 then
    for i = 1, #keys do
      redis.call('PEXPIRE', keys[i], ttl_ms)
    end
  end
end
