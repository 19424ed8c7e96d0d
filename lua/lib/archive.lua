-- lib/archive.lua: the archive: originals moved out of the conversation, indexed as they arrive.
-- USES: envelope index

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
