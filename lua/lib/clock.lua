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
