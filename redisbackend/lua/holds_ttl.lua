-- Returns the remaining lease of token's hold of a semaphore or read-write
-- lock in ms, or -2 when it has no live hold.
--
-- KEYS: holds    ARGV: token

--#include take.lua
--#include holder.lua

local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends then
  return -2
end
local left = tonumber(ends) - math.floor(now_us() / 1000)
if left <= 0 then
  return -2
end
return left
