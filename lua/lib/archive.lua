-- lib/archive.lua: the archive: originals moved out of the conversation, oldest first, capped.
-- USES: docs docs_write envelope
--
-- meta counts every envelope ever archived ('archived') and those the cap dropped from the
-- front ('archive_base'): envelope seq sits at list index seq - archive_base - 1. A message is
-- indexed before it may move here (the scripts that move messages check it), so moving it
-- only records its seq in its document record. What the cap drops leaves the index at once
-- for counting (its record is marked removed, ix_docs and ix_len shrink) and its envelope goes
-- to ixgone, whence the indexer writes a negative segment of its postings (lib/segments.lua)
-- that takes its terms' document frequencies down; its vector
-- (ixvec, with an embedder) goes with it. Every script that moves messages declares ixvec.

-- Moves the cap's excess off the archive's front, at most ARCHIVE_DROP_STEP envelopes (the
-- rest on later calls). Returns how many it dropped.
local function archive_cap(k, archive_max)
  if archive_max <= 0 then
    return 0
  end
  local drop = math.min(redis.call('LLEN', k.archive) - archive_max, ARCHIVE_DROP_STEP)
  if drop <= 0 then
    return 0
  end
  local gone = redis.call('LRANGE', k.archive, 0, drop - 1)
  local ids, changes = {}, {}
  for i = 1, #gone do
    ids[i] = envelope_head(gone[i])
  end
  local docs = doc_reader(k.ixdocs)
  docs.prefetch(ids)
  local n_docs, length, removed = 0, 0, {}
  for i, id in ipairs(ids) do
    local kind, l = docs.get(id)
    if kind ~= 0 then
      n_docs = n_docs + 1
      length = length + l
      changes[id] = {0, 0, 0}
      removed[#removed + 1] = gone[i]
    end
  end
  redis.call('LTRIM', k.archive, drop, -1)
  redis.call('HINCRBY', k.meta, 'archive_base', drop)
  -- Their vectors go at once (every id: while an index is rebuilt a record may be missing).
  if redis.call('EXISTS', k.ixvec) == 1 then
    local vectors = redis.call('HDEL', k.ixvec, unpack(ids))  -- at most ARCHIVE_DROP_STEP
    if vectors > 0 then
      redis.call('HINCRBY', k.meta, 'vx_count', -vectors)
    end
  end
  if n_docs > 0 then
    docs_write(k.ixdocs, changes)
    redis.call('RPUSH', k.ixgone, unpack(removed))
    local stats = redis.call('HMGET', k.meta, 'ix_docs', 'ix_len')
    redis.call('HSET', k.meta, 'ix_docs', (tonumber(stats[1]) or 0) - n_docs,
      'ix_len', (tonumber(stats[2]) or 0) - length)
    redis.call('HINCRBY', k.meta, 'ix_gone', #removed)
  end
  return drop
end

-- Appends envelopes (oldest first, at most MOVE_STEP) to the archive, records each indexed
-- one's seq, then applies the cap.
local function archive_push(k, envelopes, archive_max)
  if #envelopes == 0 then
    return
  end
  local total = redis.call('HINCRBY', k.meta, 'archived', #envelopes)
  local first_seq = total - #envelopes + 1
  for i = 1, #envelopes, 512 do
    redis.call('RPUSH', k.archive, unpack(envelopes, i, math.min(i + 511, #envelopes)))
  end
  local changes = {}
  for i = 1, #envelopes do
    local seq = first_seq + i - 1
    changes[envelope_head(envelopes[i])] = function(kind, length)
      if kind == 0 then
        return nil
      end
      return kind, length, seq
    end
  end
  docs_write(k.ixdocs, changes)
  archive_cap(k, archive_max)
end
