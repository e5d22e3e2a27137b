-- Renews one hold (extend_hold): TIME, HGET, HSET, PTTL and, when the
-- key's expiry moves, PEXPIRE.
--
-- KEYS: lock    ARGV: token, ttl (ms)
-- Returns 1 when renewed, 0 when the lock does not have this hold.

--#include holds_of.lua
--#include renew_hold.lua

return extend_hold(KEYS[1], 't:' .. ARGV[1], tonumber(ARGV[2]), now_ms())
