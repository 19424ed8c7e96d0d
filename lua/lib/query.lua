-- lib/query.lua: what the scripts that serve a search share: its filters checked, and how
-- much of the memory is not searchable yet. (The search itself runs in the client over the
-- segments index_read.lua returns: compozy_memory/_search/scoring.py.)
-- USES: args
--
-- kinds is '' (every kind) or comma-separated kind codes (lib/docs.lua).

local function query_kinds(text)
  if text == '' then
    return nil
  end
  local kinds = {}
  for code in string.gmatch(text, '[^,]+') do
    kinds[int_arg(code, 'a kind', 1, 7)] = true
  end
  return kinds
end

-- Messages and archived envelopes not searchable yet: the live tail past the index, and the
-- archive a rebuild has still to reach. An index of an older format searches nothing.
local function unindexed(m)
  local count = tonumber(m.count) or 0
  local archived = (tonumber(m.archived) or 0) - (tonumber(m.archive_base) or 0)
  if (tonumber(m.fmt) or 1) < DATA_FORMAT or m.ix_off then
    return count + archived
  end
  local live = math.max(0, (tonumber(m.last_id) or 0) - (tonumber(m.ix_next) or 0) + 1)
  local seq = tonumber(m.ix_seq) or 0
  local rebuilding = 0
  if seq > 0 then
    rebuilding = math.max(0, (tonumber(m.archived) or 0) - seq + 1)
  end
  return math.min(live, count + (tonumber(m.summary_count) or 0)) + rebuilding
end
