-- lib/docs_write.lua: writing the index's document records (lib/docs.lua says their layout).
-- USES: docs

-- (Integer arithmetic on doubles, exact below 2^53: no call but string.char's.)
local function doc_record(kind, length, seq)
  if length > 65535 then
    length = 65535
  end
  local s5 = seq % 256
  seq = (seq - s5) / 256
  local s4 = seq % 256
  seq = (seq - s4) / 256
  local s3 = seq % 256
  seq = (seq - s3) / 256
  local s2 = seq % 256
  seq = (seq - s2) / 256
  local l2 = length % 256
  return string.char(kind, (length - l2) / 256, l2, seq % 256, s2, s3, s4, s5)
end

-- Writes records: changes maps id -> {kind, length, seq}, or a function(kind, length, seq)
-- returning the new ones (nil: leave the record as it is). A block whose records are all 0
-- is deleted. reader: a doc_reader of k_ixdocs whose blocks read already are taken as they
-- are (nil: each block is sized and read here). Returns nothing.
local function docs_write(k_ixdocs, changes, reader)
  local by_block = {}
  for id, change in pairs(changes) do
    local b = (id - id % DOC_BLOCK) / DOC_BLOCK
    by_block[b] = by_block[b] or {}
    by_block[b][#by_block[b] + 1] = id
  end
  local writes, gone = {}, {}
  reader = reader or doc_reader(k_ixdocs)
  for b, ids in pairs(by_block) do
    local block = reader.block(b) or ''
    table.sort(ids)
    local need = (ids[#ids] % DOC_BLOCK + 1) * DOC_SIZE
    if #block < need then
      block = block .. string.rep('\0', need - #block)
    end
    local parts, at = {}, 1
    for _, id in ipairs(ids) do
      local from = (id % DOC_BLOCK) * DOC_SIZE + 1
      local change = changes[id]
      local record
      if type(change) == 'function' then
        local kind, length, seq = change(doc_decode(block, id))
        if kind ~= nil then
          record = doc_record(kind, length, seq)
        end
      else
        record = doc_record(change[1], change[2], change[3])
      end
      if record then
        parts[#parts + 1] = string.sub(block, at, from - 1)
        parts[#parts + 1] = record
        at = from + DOC_SIZE
      end
    end
    parts[#parts + 1] = string.sub(block, at)
    block = table.concat(parts)
    local alive = false
    for at_kind = 1, #block, DOC_SIZE do
      if string.byte(block, at_kind) ~= 0 then
        alive = true
        break
      end
    end
    if alive then
      writes[#writes + 1] = tostring(b)
      writes[#writes + 1] = block
    else
      gone[#gone + 1] = tostring(b)
    end
    reader.set(b, alive and block)
  end
  for from = 1, #writes, 1000 do
    redis.call('HSET', k_ixdocs, unpack(writes, from, math.min(from + 999, #writes)))
  end
  for from = 1, #gone, 1000 do
    redis.call('HDEL', k_ixdocs, unpack(gone, from, math.min(from + 999, #gone)))
  end
end
