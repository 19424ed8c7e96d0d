-- lib/packed.lua: unsigned integers packed as varints (7 bits a byte, low first, high bit set
-- on every byte but the last), in plain strings: how the index stores postings compactly.
-- Pure Lua (string.byte and string.char, many bytes a call), so the scripts run wherever the
-- server's Lua does, without the bit, struct or cmsgpack libraries.
-- USES: (none)

-- Appends n's bytes to the byte table out (n an integer >= 0).
local function put_varint(out, n)
  while n >= 128 do
    out[#out + 1] = n % 128 + 128
    n = math.floor(n / 128)
  end
  out[#out + 1] = n
end

-- The string of a byte table; string.char takes a few thousand arguments at most.
local function bytes_text(out)
  local parts = {}
  for i = 1, #out, 4000 do
    parts[#parts + 1] = string.char(unpack(out, i, math.min(i + 3999, #out)))
  end
  return table.concat(parts)
end

-- The bytes of text from position from as numbers, read in chunks.
local function text_bytes(text, from)
  local out = {}
  for i = from or 1, #text, 4000 do
    local chunk = {string.byte(text, i, math.min(i + 3999, #text))}
    for j = 1, #chunk do
      out[#out + 1] = chunk[j]
    end
  end
  return out
end

-- Reads one varint from byte table b at position at; returns the value and the next position.
local function get_varint(b, at)
  local n, scale = 0, 1
  local byte = b[at]
  while byte >= 128 do
    n = n + (byte - 128) * scale
    scale = scale * 128
    at = at + 1
    byte = b[at]
  end
  return n + byte * scale, at + 1
end
