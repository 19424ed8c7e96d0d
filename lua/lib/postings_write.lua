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
  for i = 1, #h.tail do
    out[#out + 1] = h.tail[i]
  end
  return bytes_text(out)
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
-- order to append). Reads every header with one HMGET, writes with one HSET; seals full tails
-- into blocks. Returns the number of new terms (df was 0).
local function postings_add(k_ixpost, adds)
  local terms = {}
  for term in pairs(adds) do
    terms[#terms + 1] = term
  end
  if #terms == 0 then
    return 0
  end
  local writes, new_terms = {}, 0
  for from = 1, #terms, 1000 do
    local chunk = {unpack(terms, from, math.min(from + 999, #terms))}
    local fields = {}
    for i, term in ipairs(chunk) do
      fields[2 * i - 1] = term
      fields[2 * i] = term .. '\0'
    end
    local stored = redis.call('HMGET', k_ixpost, unpack(fields))
    for i, term in ipairs(chunk) do
      local h = header_read(stored[2 * i - 1])
      if h.df == 0 then
        new_terms = new_terms + 1
      end
      local directory = nil
      local add = adds[term]
      for j = 1, #add[1] do
        local id = add[1][j]
        if h.tailn == 0 then
          h.base = h.last
        end
        put_varint(h.tail, zigzag(id - h.last))
        put_varint(h.tail, add[2][j])
        put_varint(h.tail, add[3][j])
        h.last = id
        h.tailn = h.tailn + 1
        h.df = h.df + 1
        if h.tailn >= POSTINGS_BLOCK then
          local ids = decode_postings(h.tail, 1, h.tailn, h.base)
          local low, high = ids[1], ids[1]
          for x = 2, #ids do
            low, high = math.min(low, ids[x]), math.max(high, ids[x])
          end
          directory = directory or directory_read(stored[2 * i])
          directory[#directory + 1] = {low, high}
          h.nb = h.nb + 1
          local sealed = {}
          put_varint(sealed, h.base)
          put_varint(sealed, h.tailn)
          for x = 1, #h.tail do
            sealed[#sealed + 1] = h.tail[x]
          end
          writes[#writes + 1] = term .. '\0' .. h.nb
          writes[#writes + 1] = bytes_text(sealed)
          h.tail, h.tailn = {}, 0
        end
      end
      writes[#writes + 1] = term
      writes[#writes + 1] = header_text(h)
      if directory then
        writes[#writes + 1] = term .. '\0'
        writes[#writes + 1] = directory_text(directory)
      end
    end
  end
  for from = 1, #writes, 1000 do
    redis.call('HSET', k_ixpost, unpack(writes, from, math.min(from + 999, #writes)))
  end
  return new_terms
end
