#!lua
-- trim.lua: drop the oldest messages until the memory is within the given limits.
-- KEYS: msgs meta archive summaries dedupe
-- ARGV: ttl_ms archive_max keep_messages max_tokens
--   ttl_ms         TTL set on every key; 0 leaves TTLs alone
--   archive_max    the archive keeps at most this many originals; 0 = no cap
--   keep_messages  at most this many messages remain; -1 = no message limit
--   max_tokens     at most this many tokens remain; -1 = no token limit
-- Returns: {removed_count, removed_tokens, total_tokens, total_count}
-- Priority 0 messages are never removed: they keep their place and the limit is met, if it
-- can be, by removing newer messages of other priorities. Removed originals go to the archive.
local ttl_ms = int_arg(a_ttl_ms, 'ttl_ms', 0, nil)
local archive_max = int_arg(a_archive_max, 'archive_max', 0, nil)
local keep = int_arg(a_keep_messages, 'keep_messages', -1, nil)
local max_tokens = int_arg(a_max_tokens, 'max_tokens', -1, nil)

local tokens, count = totals(k_meta)
local function over()
  return (keep >= 0 and count > keep) or (max_tokens >= 0 and tokens > max_tokens)
end

local kept, removed = {}, {}
local removed_tokens = 0
local deltas = new_deltas()
local scanned = 0
while over() do
  local envelopes = redis.call('LRANGE', k_msgs, scanned, scanned + 127)
  if #envelopes == 0 then
    break
  end
  local i = 1
  while i <= #envelopes and over() do
    local env = envelopes[i]
    local _, t, p = envelope_head(env)
    if p == 0 then
      kept[#kept + 1] = env
    else
      removed[#removed + 1] = env
      removed_tokens = removed_tokens + t
      tokens = tokens - t
      count = count - 1
      account(deltas, -1, t, p)
    end
    scanned = scanned + 1
    i = i + 1
  end
end

if #removed > 0 then
  rewrite_head(k_msgs, scanned, kept)
  archive(k_archive, removed, archive_max)
  deltas.archived = #removed
  deltas.trimmed = #removed
  apply_deltas(k_meta, deltas)
end
apply_ttl(KEYS, ttl_ms)
return {#removed, removed_tokens, tokens, count}
