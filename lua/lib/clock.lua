-- lib/clock.lua: the server clock.
-- USES: (none)

-- The server clock in milliseconds.
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- The server clock in microseconds: a new incarnation's id.
local function now_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- Zeros that pad TIME's microseconds (0..999999, as digits without padding) to six digits.
local PAD_US = {'00000', '0000', '000', '00', '0', ''}

-- The server clock as text, in milliseconds and in microseconds: what formatting now_ms()
-- and now_us() would give, with one TIME and no conversion (a write's stamps are text).
local function now_texts()
  local now = redis.call('TIME')
  local us = PAD_US[#now[2]] .. now[2]
  return now[1] .. string.sub(us, 1, 3), now[1] .. us
end
