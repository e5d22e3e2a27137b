-- Returns the remaining lease of a hold in ms, or -2 when the lock does
-- not have this hold or its lease has ended.
--
-- KEYS: lock    ARGV: token

--#include take.lua
--#include holder.lua

local ends = redis.call('HGET', KEYS[1], 't:' .. ARGV[1])
if not ends then
  return -2
end
local left = tonumber(ends) - math.floor(now_us() / 1000)
if left <= 0 then
  return -2
end
return left
