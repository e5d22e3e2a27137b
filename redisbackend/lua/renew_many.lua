-- Renews a batch of holds of different locks in one script run, on a
-- single node (not Cluster, whose keys of one script must share a slot):
-- one TIME for the batch, and no script call per lock, which would cost
-- Redis about as much as the lock's own commands, and the client the
-- encoding and decoding of a command per lock (see the held-locks figures
-- in docs/performance.md). A lock whose key holds another type (an operator's
-- write) fails alone: its entry is the error message. Any other error
-- fails the batch, so that the client sees it (READONLY after a failover).
--
-- KEYS: the locks    ARGV: token, ttl (ms) for each lock, in order
-- Returns for each lock 1 (renewed), 0 (the lock does not have the hold)
-- or an error message.

--#include holds_of.lua
--#include renew_hold.lua

local now = now_ms()
local out = {}
for i = 1, #KEYS do
  local ok, res = pcall(extend_hold, KEYS[i], 't:' .. ARGV[2 * i - 1], tonumber(ARGV[2 * i]), now)
  if ok then
    out[i] = res
  else
    local msg = type(res) == 'table' and res.err or tostring(res)
    if string.sub(msg, 1, 9) ~= 'WRONGTYPE' then
      error(res)
    end
    out[i] = msg
  end
end
return out
