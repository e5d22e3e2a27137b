-- Sets the lease of token's live hold of a semaphore or read-write lock to
-- ttl from now; it never re-creates a lapsed hold.
--
-- KEYS: holds, info, writers, readers, admitted    ARGV: token, ttl (ms)
-- Returns 1 when renewed, 0 when the token has no live hold.

--#include take.lua
--#include holder.lua
--#include holds.lua

local holds, info = KEYS[1], KEYS[2]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local now = math.floor(now_us() / 1000)
local ends = redis.call('ZSCORE', holds, token)
if not ends or tonumber(ends) <= now then
  return 0
end
redis.call('ZADD', holds, now + ttl, token)
keep_alive(info, {holds, KEYS[3], KEYS[4], KEYS[5]}, now)
return 1
