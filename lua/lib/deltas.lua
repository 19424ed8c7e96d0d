-- lib/deltas.lua: changing a memory's meta: exact totals through deltas, its incarnation (set
-- from the server clock when meta is created, so a memory that expired and was written again
-- is told apart from the old one, and given again when its server's replication history
-- changed: lineage below), and the deadline every key of the memory shares (its TTL).
-- USES: clock

-- Meta changes are gathered in a table of field -> delta and written with one HMGET and one
-- HSET, whatever the number of messages and priorities involved.
local function new_deltas()
  return {tokens = 0, count = 0}
end

-- Appends 'rid' and the server's replication id (INFO replication's master_replid: a primary
-- keeps it while it serves, a replica promoted in its place starts a new one) to fields, a
-- list of field, value pairs for an HSET; returns the id. Where INFO is not to be had (an ACL
-- line from before this release, an emulator without it) nothing is appended, and nil is
-- returned: the memory's lineage is then not checked (lineage).
local function stamp_lineage(fields)
  local info = redis.pcall('INFO', 'replication')
  local rid = type(info) == 'string' and string.match(info, 'master_replid:(%w+)') or nil
  if rid and fields then
    fields[#fields + 1] = 'rid'
    fields[#fields + 1] = rid
  end
  return rid
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
    stamp_lineage(updates)
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
    local fields = {'inc', inc, 'fmt', DATA_FORMAT}
    stamp_lineage(fields)
    redis.call('HSET', meta, unpack(fields))
  end
  return inc
end

-- The incarnation a compare-and-set compares (flush commits, the flush lock, replace with
-- if_incarnation), after checking the memory's lineage: meta's 'rid' is the server's
-- replication id (INFO replication's master_replid) when its incarnation was given. A
-- replica's promotion gives the server a new one; so does a restart that lost the server's
-- replication state, and a Cluster slot moving to another shard. Then messages acknowledged
-- on the old primary may be missing here and other writers may have given their ids again:
-- a compare-and-set read before must not land. So meta gets a new incarnation (and the
-- server's id), which this returns with true; a memory written before 'rid' existed gets one
-- too, once. meta: its key; m: its fields, with inc and rid read (inc nil: no memory).
local function lineage(meta, m)
  if m.inc == nil then
    return nil, false
  end
  local rid = stamp_lineage(nil)
  if rid == nil or m.rid == rid then
    return m.inc, false
  end
  local inc = string.format('%d', now_us())
  if inc == m.inc then
    inc = inc .. '.1'
  end
  redis.call('HSET', meta, 'inc', inc, 'rid', rid)
  return inc, true
end

-- TTLs. Every key of a memory expires at one deadline, meta's (PEXPIRETIME): a key that
-- expired before the others would read as evicted. A write leaves the deadline alone while it
-- is between ttl_ms and ttl_ms + ttl_slack(ttl_ms) away, and otherwise moves it for every key
-- at once to ttl_ms + ttl_slack(ttl_ms) from now. So the keys expire between the TTL and the
-- TTL plus 1/TTL_SLACK_PARTS of it after the memory's last write, and a write sets its keys'
-- expiry once in ttl_slack(ttl_ms) milliseconds, not on every call; a key a write creates in
-- between is given the deadline the others have.

-- The slack a deadline is given past the TTL: 1/TTL_SLACK_PARTS of it, at least 1 ms.
local function ttl_slack(ttl_ms)
  return math.ceil(ttl_ms / TTL_SLACK_PARTS)
end

-- The memory's deadline (ms since the epoch) after a write at now (ms), and whether the write
-- moves it (meta's own is then not between ttl_ms and ttl_ms + the slack away, or meta has
-- none: every key of the memory must be set to the new one). ttl_ms > 0.
local function ttl_deadline(meta, ttl_ms, now)
  local at = redis.call('PEXPIRETIME', meta)
  if at >= now + ttl_ms and at <= now + ttl_ms + ttl_slack(ttl_ms) then
    return at, false
  end
  return now + ttl_ms + ttl_slack(ttl_ms), true
end

-- Sets the memory's TTL (ttl_ms; 0 leaves TTLs alone) on keys, every key of the memory the
-- script declares (its whole KEYS: a script that declares only some of them calls ttl_follow),
-- at the memory's deadline, moved if it is due (ttl_deadline).
local function apply_ttl(meta, keys, ttl_ms)
  if ttl_ms > 0 then
    local at = ttl_deadline(meta, ttl_ms, now_ms())
    for i = 1, #keys do
      redis.call('PEXPIREAT', keys[i], at)
    end
  end
end

-- apply_ttl for a write that knows which keys it created: created_a and created_b (keys, or
-- false). When the deadline does not move only they are set: the others have it. now: the
-- server clock (ms).
local function apply_ttl_created(meta, keys, ttl_ms, now, created_a, created_b)
  if ttl_ms > 0 then
    local at, moved = ttl_deadline(meta, ttl_ms, now)
    if moved then
      for i = 1, #keys do
        redis.call('PEXPIREAT', keys[i], at)
      end
    else
      if created_a then
        redis.call('PEXPIREAT', created_a, at)
      end
      if created_b then
        redis.call('PEXPIREAT', created_b, at)
      end
    end
  end
end

-- For a script that writes only some of a memory's keys: sets keys to the deadline the memory
-- has (meta's), never moving it, since the keys not passed would keep the old one; nothing
-- when ttl_ms is 0 or meta has no deadline (the next write that declares every key sets one).
local function ttl_follow(meta, keys, ttl_ms)
  if ttl_ms > 0 then
    local at = redis.call('PEXPIRETIME', meta)
    if at > 0 then
      for i = 1, #keys do
        redis.call('PEXPIREAT', keys[i], at)
      end
    end
  end
end
