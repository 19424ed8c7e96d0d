-- lib/postings_write.lua: writing a term's packed postings (lib/postings.lua says their layout).
-- USES: packed postings

local function header_text(h)
  local out = {}
  put_varint(out, h.df)
  put_varint(out, h.first)
  put_varint(out, h.nb)
  put_varint(out, h.base)
  put_varint(out, h.last)
  put_varint(out, h.tailn)
  put_varint(out, h.dirhigh)
  return string.char(unpack(out)) .. h.tail
end

local function block_text(ids, tfs, lengths, base)
  local out = {}
  put_varint(out, base)
  put_varint(out, #ids)
  local previous = base
  for i = 1, #ids do
    put_varint(out, zigzag(ids[i] - previous))
    put_varint(out, tfs[i])
    put_varint(out, lengths[i])
    previous = ids[i]
  end
  return bytes_text(out)
end

local function directory_text(entries)
  local out, previous = {}, 0
  for _, e in ipairs(entries) do
    put_varint(out, zigzag(e[1] - previous))
    put_varint(out, e[2] - e[1])
    previous = e[2]
  end
  return bytes_text(out)
end

-- Adds postings to many terms at once. adds maps term -> {ids, tfs, lengths} (arrays in the
-- order to append). Reads every header with one HMGET, writes with one HSET; a tail that
-- reaches POSTINGS_BLOCK postings is sealed into a block. The tail stays packed: appending
-- costs the new postings' bytes, not the tail's.
local function postings_add(k_ixpost, adds)
  local terms = {}
  for term in pairs(adds) do
    terms[#terms + 1] = term
  end
  local writes = {}
  for from = 1, #terms, 1000 do
    local chunk = {unpack(terms, from, math.min(from + 999, #terms))}
    local stored = redis.call('HMGET', k_ixpost, unpack(chunk))
    for i, term in ipairs(chunk) do
      local h = header_read(stored[i] or nil)
      local appended = {}
      local add = adds[term]
      local out = {}
      for j = 1, #add[1] do
        local id = add[1][j]
        if h.tailn == 0 then
          h.base = h.last
        end
        put_varint(out, zigzag(id - h.last))
        put_varint(out, add[2][j])
        put_varint(out, add[3][j])
        h.last = id
        h.tailn = h.tailn + 1
        h.df = h.df + 1
        if h.tailn >= POSTINGS_BLOCK then
          h.tail = h.tail .. bytes_text(out)
          out = {}
          local ids = tail_postings(h)
          local low, high = ids[1], ids[1]
          for x = 2, #ids do
            low, high = math.min(low, ids[x]), math.max(high, ids[x])
          end
          -- The directory grows by one entry a block, appended without reading it (a
          -- common term's is long): a delta from the previous block's largest id.
          local entry = {}
          put_varint(entry, zigzag(low - h.dirhigh))
          put_varint(entry, high - low)
          appended[#appended + 1] = string.char(unpack(entry))
          h.dirhigh = high
          h.nb = h.nb + 1
          local sealed = {}
          put_varint(sealed, h.base)
          put_varint(sealed, h.tailn)
          writes[#writes + 1] = term .. '\0' .. h.nb
          writes[#writes + 1] = string.char(unpack(sealed)) .. h.tail
          h.tail, h.tailn = '', 0
        end
      end
      if #out > 0 then
        h.tail = h.tail .. bytes_text(out)
      end
      writes[#writes + 1] = term
      writes[#writes + 1] = header_text(h)
      if #appended > 0 then
        local directory = redis.call('HGET', k_ixpost, term .. '\0') or ''
        writes[#writes + 1] = term .. '\0'
        writes[#writes + 1] = directory .. table.concat(appended)
      end
    end
  end
  for from = 1, #writes, 1000 do
    redis.call('HSET', k_ixpost, unpack(writes, from, math.min(from + 999, #writes)))
  end
end
