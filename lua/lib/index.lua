-- lib/index.lua: the archive's inverted index: postings and document records.
-- USES: args
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
