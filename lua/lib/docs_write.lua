-- lib/docs_write.lua: writing the index's document records (lib/docs.lua says their layout).
-- USES: docs

local function doc_record(kind, length, seq)
  local s = {}
  for i = 5, 1, -1 do
    s[i] = seq % 256
    seq = math.floor(seq / 256)
  end
  length = math.min(length, 65535)
  return string.char(kind, math.floor(length / 256), length % 256, s[1], s[2], s[3], s[4], s[5])
end

-- Writes records: changes maps id -> {kind, length, seq}, or a function(kind, length, seq)
-- returning the new ones (nil: leave the record as it is). A block whose records are all 0
-- is deleted. Returns nothing.
local function docs_write(k_ixdocs, changes)
  local by_block = {}
  for id, change in pairs(changes) do
    local b = math.floor(id / DOC_BLOCK)
    by_block[b] = by_block[b] or {}
    by_block[b][#by_block[b] + 1] = id
  end
  local writes, gone = {}, {}
  for b, ids in pairs(by_block) do
    doc_sized(k_ixdocs, tostring(b))
    local block = redis.call('HGET', k_ixdocs, tostring(b)) or ''
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
  end
  for from = 1, #writes, 1000 do
    redis.call('HSET', k_ixdocs, unpack(writes, from, math.min(from + 999, #writes)))
  end
  for from = 1, #gone, 1000 do
    redis.call('HDEL', k_ixdocs, unpack(gone, from, math.min(from + 999, #gone)))
  end
end
