-- _lib.lua: helpers every script shares. The loader (compozy_memory/_wire/scripts.py) puts,
-- at the top of each script: the limits from compozy_memory/_model/limits.py as
-- 'local NAME = value' lines, then this file, then locals for the script's declared KEYS
-- ('k_<name>') and ARGV ('a_<name>', and ARGS_FROM: the index of the first variadic
-- argument). Helpers never read KEYS or ARGV themselves: they take what they need, so the
-- same code runs as an EVAL script and inside a Redis Functions library.
--
-- Conventions shared by all scripts:
--   Keys of a memory are always declared in one order: msgs meta archive summaries dedupe
--   lock (each script names the ones it touches, in that order).
--   Errors are raised as 'COMPOZY_<CODE> <text>' before the first write; the client maps
--   INVALID, TOOLARGE, CONFLICT and STALE to typed exceptions (CORRUPT is a ScriptError).
--   An envelope starts with '{"id":N,"ts":T,"tokens":K,"priority":P,' so a script reads
--   those four fields with one pattern match, without decoding JSON.
--   meta's 'inc' is the memory's incarnation: set from the server clock when meta is
--   created, so a memory that expired and was written again is told apart from the old one.

local ENVELOPE_HEAD = '^{"id":(%d+),"ts":%d+,"tokens":(%d+),"priority":(%d+),'

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

-- The server clock in milliseconds.
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- The server clock in microseconds: a new incarnation's id.
local function now_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- An envelope: the fields the script checked, then the caller's body without its '{'.
local function envelope(id, ts, tokens, priority, body)
  return string.format('{"id":%d,"ts":%d,"tokens":%d,"priority":%d,', id, ts, tokens,
    priority) .. string.sub(body, 2)
end

-- Parses an envelope's id, tokens and priority.
local function envelope_head(env)
  local id, tokens, priority = string.match(env, ENVELOPE_HEAD)
  if id == nil then
    fail('CORRUPT', 'an envelope does not start with id, ts, tokens, priority: '
      .. string.sub(env, 1, 60))
  end
  return tonumber(id), tonumber(tokens), tonumber(priority)
end

-- Replaces the first `scanned` messages of list `key` with `kept` (oldest first).
local function rewrite_head(key, scanned, kept)
  redis.call('LTRIM', key, scanned, -1)
  for i = #kept, 1, -1 do
    redis.call('LPUSH', key, kept[i])
  end
end

local function json_object_arg(body, what)
  if string.sub(body, 1, 2) ~= '{"' or string.sub(body, -1) ~= '}' then
    fail('INVALID', what .. ' must be a non-empty JSON object')
  end
end

-- Checks n message triples (tokens, priority, body) in args from index first and returns
-- them parsed: {tokens = {...}, priority = {...}, body = {...}}, numbers normalised.
local function validate_batch(args, first, n, max_tokens)
  if #args ~= first - 1 + 3 * n then
    fail('INVALID', 'expected ' .. n .. ' message triples, got ' .. (#args - first + 1)
      .. ' arguments')
  end
  local batch = {tokens = {}, priority = {}, body = {}}
  for i = 1, n do
    local at = first + 3 * (i - 1)
    -- Labels are built only on failure: this loop runs on every append.
    local tokens = int_or_nil(args[at], 0, MAX_MESSAGE_TOKENS)
      or int_arg(args[at], 'message ' .. i .. ' tokens', 0, MAX_MESSAGE_TOKENS)
    if max_tokens > 0 and tokens > max_tokens then
      fail('TOOLARGE', 'message ' .. i .. ' has ' .. tokens
        .. ' tokens, more than the memory limit of ' .. max_tokens)
    end
    batch.tokens[i] = tokens
    batch.priority[i] = int_or_nil(args[at + 1], 0, MAX_PRIORITY)
      or int_arg(args[at + 1], 'message ' .. i .. ' priority', 0, MAX_PRIORITY)
    local body = args[at + 2]
    if string.sub(body, 1, 2) ~= '{"' or string.sub(body, -1) ~= '}' then
      fail('INVALID', 'message ' .. i .. ' body must be a non-empty JSON object')
    end
    batch.body[i] = body
  end
  return batch
end

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

-- Stores a validated batch; returns first_id, last_id and the new meta values.
local function push_batch(msgs, meta, batch, extra_deltas)
  local n = #batch.tokens
  local deltas = extra_deltas or new_deltas()
  for i = 1, n do
    account(deltas, 1, batch.tokens[i], batch.priority[i])
  end
  deltas.last_id = (deltas.last_id or 0) + n
  local values = apply_deltas(meta, deltas)
  local last_id = values.last_id
  local first_id = last_id - n + 1
  local ts = now_ms()
  local envelopes = {}
  for i = 1, n do
    envelopes[#envelopes + 1] = envelope(first_id + i - 1, ts, batch.tokens[i],
      batch.priority[i], batch.body[i])
    if #envelopes == 512 then
      redis.call('RPUSH', msgs, unpack(envelopes))
      envelopes = {}
    end
  end
  if #envelopes > 0 then
    redis.call('RPUSH', msgs, unpack(envelopes))
  end
  return first_id, last_id, values
end

-- Reads the oldest prefix_len live messages and checks that they are the ids the caller
-- saw, args[from + 1 .. from + prefix_len] (COMPOZY_MOVED if not: read again and retry);
-- returns them with their {tokens, priority}.
local function checked_prefix(k_msgs, args, from, prefix_len)
  local prefix = redis.call('LRANGE', k_msgs, 0, prefix_len - 1)
  if #prefix ~= prefix_len then
    fail('MOVED', 'the memory has fewer messages than the plan saw')
  end
  local heads = {}
  for i = 1, prefix_len do
    local id, tokens, priority = envelope_head(prefix[i])
    if string.format('%d', id) ~= args[from + i] then
      fail('MOVED', 'message ' .. i .. ' is ' .. id .. ', the plan saw ' .. args[from + i])
    end
    heads[i] = {tokens, priority}
  end
  return prefix, heads
end

-- Splits a checked prefix into what stays and what goes; remove maps an id (as text) to its
-- index terms. Accounts what goes in deltas. Refuses ids outside the prefix, and pinned ones
-- unless pinned_ok.
local function split_prefix(prefix, heads, remove, deltas, pinned_ok)
  local kept, removed, terms = {}, {}, {}
  local removed_tokens = 0
  for i = 1, #prefix do
    local id = string.format('%d', (envelope_head(prefix[i])))
    local doc = remove[id]
    if doc ~= nil then
      if heads[i][2] == 0 and not pinned_ok then
        fail('INVALID', 'message ' .. id .. ' is pinned (priority 0) and never removed')
      end
      removed[#removed + 1] = prefix[i]
      terms[#terms + 1] = doc
      removed_tokens = removed_tokens + heads[i][1]
      account(deltas, -1, heads[i][1], heads[i][2])
      remove[id] = nil
    else
      kept[#kept + 1] = prefix[i]
    end
  end
  if next(remove) ~= nil then
    fail('INVALID', 'an id to remove is not among the messages the plan saw')
  end
  return kept, removed, terms, removed_tokens
end

-- The archive and its index.
--
-- Every archived message (not folded summaries) is a document of the memory's inverted index,
-- kept by the same scripts that move messages into and out of the archive, so the two never
-- disagree. The client analyses the text (stemming, stop words) and passes each document's
-- terms as one argument: 'length\tterm\ttf\tterm\ttf...'. The index is two keys in the
-- memory's slot:
--   ixpost  ZSET, every score 0, members 'term\t<id, 12 digits>\ttf\tlength\trole', so one
--           term's postings are a lexicographic range, newest last; at most POSTINGS_CAP per
--           term (the oldest go first; document frequencies stay exact).
--   ixdocs  HASH  'd:<id>' -> 'seq\trole\tterms argument'   (for removal, and to find the
--                  message in the archive: it is at index seq - archive_base - 1)
--                 'f:<term>' -> document frequency
-- meta counts the documents (ix_docs) and their total length (ix_len), every envelope ever
-- archived (archived) and those dropped from the archive's front by its cap (archive_base).

local function split_tabs(text)
  local out = {}
  for field in string.gmatch(text, '[^\t]+') do
    out[#out + 1] = field
  end
  return out
end

local function posting(term, id, tf, length, role)
  return term .. '\t' .. string.format('%012d', id) .. '\t' .. tf .. '\t' .. length .. '\t'
    .. role
end

local ROLE = '^{"id":%d+,"ts":%d+,"tokens":%d+,"priority":%d+,"role":"(%a+)"'

local function index_add(k_ixpost, k_ixdocs, id, seq, env, terms)
  local fields = split_tabs(terms)
  local length = tonumber(fields[1])
  if length == nil or #fields % 2 ~= 1 then
    fail('INVALID', 'the terms of message ' .. id .. ' are not length, then term/tf pairs')
  end
  local role = string.match(env, ROLE) or 'user'
  for i = 2, #fields, 2 do
    local term = fields[i]
    redis.call('ZADD', k_ixpost, 0, posting(term, id, fields[i + 1], length, role))
    redis.call('HINCRBY', k_ixdocs, 'f:' .. term, 1)
    local low, high = '[' .. term .. '\t', '(' .. term .. '\t~'
    if redis.call('ZLEXCOUNT', k_ixpost, low, high) > POSTINGS_CAP then
      local oldest = redis.call('ZRANGEBYLEX', k_ixpost, low, high, 'LIMIT', 0, 1)
      redis.call('ZREM', k_ixpost, oldest[1])
    end
  end
  redis.call('HSET', k_ixdocs, 'd:' .. id, seq .. '\t' .. role .. '\t' .. terms)
  return length
end

-- Removes document id from the index; returns its length, or nil if it was not indexed.
local function index_remove(k_ixpost, k_ixdocs, id)
  local doc = redis.call('HGET', k_ixdocs, 'd:' .. id)
  if not doc then
    return nil
  end
  local fields = split_tabs(doc)
  local role, length = fields[2], tonumber(fields[3])
  for i = 4, #fields, 2 do
    local term = fields[i]
    redis.call('ZREM', k_ixpost, posting(term, id, fields[i + 1], length, role))
    if redis.call('HINCRBY', k_ixdocs, 'f:' .. term, -1) <= 0 then
      redis.call('HDEL', k_ixdocs, 'f:' .. term)
    end
  end
  redis.call('HDEL', k_ixdocs, 'd:' .. id)
  return length
end

-- Appends envelopes (oldest first) to the archive; terms[i] indexes envelope i ('' or nil:
-- not indexed, for folded summaries). The cap then drops the oldest archived envelopes and
-- their documents.
local function archive(k, envelopes, terms, archive_max)
  local total = redis.call('HINCRBY', k.meta, 'archived', #envelopes)
  local first_seq = total - #envelopes + 1
  local docs, length = 0, 0
  for i = 1, #envelopes, 512 do
    redis.call('RPUSH', k.archive, unpack(envelopes, i, math.min(i + 511, #envelopes)))
  end
  for i = 1, #envelopes do
    if terms[i] ~= nil and terms[i] ~= '' then
      local id = envelope_head(envelopes[i])
      length = length + index_add(k.ixpost, k.ixdocs, id, first_seq + i - 1, envelopes[i],
        terms[i])
      docs = docs + 1
    end
  end
  if archive_max > 0 then
    local drop = redis.call('LLEN', k.archive) - archive_max
    if drop > 0 then
      local gone = redis.call('LRANGE', k.archive, 0, drop - 1)
      for i = 1, #gone do
        local removed = index_remove(k.ixpost, k.ixdocs, (envelope_head(gone[i])))
        if removed ~= nil then
          docs = docs - 1
          length = length - removed
        end
      end
      redis.call('LTRIM', k.archive, drop, -1)
      redis.call('HINCRBY', k.meta, 'archive_base', drop)
    end
  end
  if docs ~= 0 or length ~= 0 then
    redis.call('HINCRBY', k.meta, 'ix_docs', docs)
    redis.call('HINCRBY', k.meta, 'ix_len', length)
  end
end

-- The archived envelope of indexed message id, or nil.
local function archived_by_id(k, id)
  local doc = redis.call('HGET', k.ixdocs, 'd:' .. id)
  if not doc then
    return nil
  end
  local seq = tonumber(string.match(doc, '^(%d+)'))
  if k.archive_base == nil then  -- read once per call: no script here changes it
    k.archive_base = tonumber(redis.call('HGET', k.meta, 'archive_base')) or 0
  end
  return redis.call('LINDEX', k.archive, seq - k.archive_base - 1)
end

-- The frequency of term in an ixdocs 'd:' value ('seq\trole\tlength\tterm\ttf...'), or nil;
-- needle is '\t' .. term .. '\t'.
local function term_frequency(doc, term, needle)
  local from = 1
  while true do
    local at, stop = string.find(doc, needle, from, true)
    if at == nil then
      return nil
    end
    -- A term made of digits can also match a length or a tf: count the tabs before it.
    local tabs = 3
    if string.find(term, '^%d+$') then
      tabs = select(2, string.gsub(string.sub(doc, 1, at), '\t', ''))
    end
    if tabs >= 3 and tabs % 2 == 1 then
      return tonumber(string.match(doc, '^(%d+)', stop + 1))
    end
    from = at + 1
  end
end

-- BM25 over the index: {{id, score}, ...} best first, at most limit. The cost follows the
-- query, not the history:
--   1. Candidates come from the rarest terms' postings, read while they fit QUERY_BUDGET in
--      all (the rarest term is always read, at most QUERY_POSTINGS of its newest postings).
--   2. The terms left (common ones: a speaker's name, a month) are not read; they are scored
--      exactly on the best candidates, from those documents' own terms in ixdocs.
-- A document's final score adds neighbour_weight times the better of its two neighbours'
-- scores: in a conversation the answer often sits in the turn after the one with the
-- question's words. since_id (0: none) and roles (a set, or nil) filter documents.
local function bm25_search(k, terms, limit, k1, b, neighbour_weight, since_id, roles)
  local stats = redis.call('HMGET', k.meta, 'ix_docs', 'ix_len')
  local n_docs, total = tonumber(stats[1]) or 0, tonumber(stats[2]) or 0
  if n_docs <= 0 or limit <= 0 then
    return {}
  end
  local avg = total / n_docs
  -- BM25's length normalisation k1 * (1 - b + b * length / avg), as fixed + per_length * length.
  local fixed, per_length = k1 * (1 - b), k1 * b / avg
  local order = {}
  for _, term in ipairs(terms) do
    local df = tonumber(redis.call('HGET', k.ixdocs, 'f:' .. term))
    if df then
      order[#order + 1] = {term, df, math.log(1 + (n_docs - df + 0.5) / (df + 0.5)) * (k1 + 1)}
    end
  end
  table.sort(order, function(x, y) return x[2] < y[2] end)
  -- 1. Postings of the rarest terms. The role is read only when a filter asks for it.
  local pattern = roles and '^(%d+)\t(%d+)\t(%d+)\t(%a+)' or '^(%d+)\t(%d+)\t(%d+)'
  local scores, found, left, later = {}, 0, QUERY_BUDGET, {}
  -- Adds a term's newest postings to the scores. With new_only, documents already scored are
  -- left to step 2, and the ones it adds are marked in the set it returns.
  local function read(term, weight, new_only, most)
    local start, added = #term + 2, {}
    local postings = redis.call('ZREVRANGEBYLEX', k.ixpost, '(' .. term .. '\t~',
      '[' .. term .. '\t', 'LIMIT', 0, math.min(most, left))
    left = left - #postings
    for i = 1, #postings do
      local id, tf, length, role = string.match(postings[i], pattern, start)
      id = tonumber(id)
      if id >= since_id and (roles == nil or roles[role]) then
        local old = scores[id]
        if old == nil or not new_only then
          tf = tonumber(tf)
          scores[id] = (old or 0) + weight * tf / (tf + fixed + per_length * length)
          if old == nil then
            found = found + 1
            added[id] = true
          end
        end
      end
    end
    return added
  end
  for n, entry in ipairs(order) do
    if n == 1 or entry[2] <= left then
      read(entry[1], entry[3], false, QUERY_POSTINGS)
    else
      entry.needle = '\t' .. entry[1] .. '\t'
      later[#later + 1] = entry
    end
  end
  -- Too few candidates to fill the hits well (the rare terms are rare indeed): the next
  -- term's newest postings bring more, its share counted here for those and in step 2 for
  -- the others.
  if #later > 0 and found < 4 * limit and left > 0 then
    later[1].counted = read(later[1][1], later[1][3], true, 4 * limit - found)
  end
  local function better(x, y)
    if x[2] ~= y[2] then
      return x[2] > y[2]
    end
    return x[1] > y[1]  -- ties go to the newer message: the latest value of a changed fact
  end
  -- The best candidates, in a heap whose root is the worst kept: most documents lose to it at
  -- once, before anything is allocated for them. Common terms left to score widen the pool.
  local keep = 4 * limit
  if #later > 0 then
    keep = math.max(keep, RESCORE_POOL)
  end
  local heap, n = {}, 0
  local function sift_down(at)
    while true do
      local low, l, r = at, 2 * at, 2 * at + 1
      if l <= n and better(heap[low], heap[l]) then low = l end
      if r <= n and better(heap[low], heap[r]) then low = r end
      if low == at then return end
      heap[at], heap[low] = heap[low], heap[at]
      at = low
    end
  end
  for id, score in pairs(scores) do
    if n < keep then
      n = n + 1
      heap[n] = {id, score}
      local at = n
      while at > 1 and better(heap[math.floor(at / 2)], heap[at]) do
        local up = math.floor(at / 2)
        heap[at], heap[up] = heap[up], heap[at]
        at = up
      end
    else
      local root = heap[1]
      if score > root[2] or (score == root[2] and id > root[1]) then
        heap[1] = {id, score}
        sift_down(1)
      end
    end
  end
  local ranked = heap
  -- 2. The common terms, scored exactly on the candidates from their documents' own terms
  -- (one HMGET for many candidates: far cheaper than a call each).
  if #later > 0 then
    for first = 1, #ranked, 500 do
      local last = math.min(first + 499, #ranked)
      local fields = {}
      for i = first, last do
        fields[#fields + 1] = 'd:' .. ranked[i][1]
      end
      local docs = redis.call('HMGET', k.ixdocs, unpack(fields))
      for i = first, last do
        local entry, doc = ranked[i], docs[i - first + 1]
        if doc then
          local norm = fixed + per_length * tonumber(string.match(doc, '^%d+\t%a+\t(%d+)'))
          for _, term in ipairs(later) do
            if not (term.counted and term.counted[entry[1]]) then
              local tf = term_frequency(doc, term[1], term.needle)
              if tf then
                entry[2] = entry[2] + term[3] * tf / (tf + norm)
              end
            end
          end
          scores[entry[1]] = entry[2]
        end
      end
    end
  end
  table.sort(ranked, better)
  if neighbour_weight > 0 then
    -- Only the best raw scores can gain from a neighbour enough to matter.
    local pool, seen = {}, {}
    for i = 1, math.min(#ranked, 4 * limit) do
      local id = ranked[i][1]
      for _, near in ipairs({id - 1, id, id + 1}) do
        -- A neighbour with no matching term of its own joins when it is indexed (and no
        -- role filter asks for more than the index can tell without reading it).
        if not seen[near] and (scores[near] or (roles == nil and near >= since_id
            and redis.call('HEXISTS', k.ixdocs, 'd:' .. near) == 1)) then
          seen[near] = true
          local boost = math.max(scores[near - 1] or 0, scores[near + 1] or 0)
          pool[#pool + 1] = {near, (scores[near] or 0) + neighbour_weight * boost}
        end
      end
    end
    table.sort(pool, better)
    ranked = pool
  end
  local out = {}
  for i = 1, math.min(#ranked, limit) do
    out[i] = ranked[i]
  end
  return out
end

-- Sets the instance TTL on every key in keys (PEXPIRE on a missing key is a no-op).
local function apply_ttl(keys, ttl_ms)
  if ttl_ms > 0 then
    for i = 1, #keys do
      redis.call('PEXPIRE', keys[i], ttl_ms)
    end
  end
end

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
-- first call got (n messages ending at last), the current totals, and duplicate = 1.
local function dedupe_reply(meta, last, n)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'summary_tokens', 'inc')
  return {last - n + 1, last, tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0, 1,
    t[4] or ''}
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

local function totals(meta)
  local t = redis.call('HMGET', meta, 'tokens', 'count', 'last_id')
  return tonumber(t[1]) or 0, tonumber(t[2]) or 0, tonumber(t[3]) or 0
end
