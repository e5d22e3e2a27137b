-- The acquire script (acquire_body.lua, run as a function) preceded by the
-- check of the job's tick record, and followed by its write when the lock
-- is taken, in one step: a record that names the tick asked for or a later
-- one refuses the attempt (and changes nothing), unless it is this very
-- claim, the tick's by this token (its acquire's reply was lost: this is a
-- retry). Ticks are compared byte by byte: Lua's < on strings follows the
-- server's locale.
--
-- KEYS: lock, fence counter, tombstone, tick record
-- ARGV: tick, record life (ms), then the acquire script's ARGV: owner,
--       token, ttl (ms), counter expiry (ms, 0: none), fence floor[,
--       process, identity]
-- Returns the acquire script's reply, or {2, the record's tick, its
-- token} when the tick was claimed.

--#include take.lua

local function acquire(ARGV)
--#include acquire_body.lua
end

local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local record, tick, life, token = KEYS[4], ARGV[1], tonumber(ARGV[2]), ARGV[4]
local last = redis.call('HMGET', record, 'tick', 'token')
local mine = last[1] == tick and last[2] == token
if last[1] and not mine and not before(last[1], tick) then
  return {2, last[1], last[2] or ''}
end
local res = acquire({unpack(ARGV, 3)})
if type(res) == 'number' or res[1] == 1 then
  if not mine then
    if last[1] then
      redis.call('HSET', record, 'tick', tick, 'token', token, 'ptick', last[1], 'ptoken', last[2] or '')
    else
      redis.call('HSET', record, 'tick', tick, 'token', token)
    end
  end
  redis.call('PEXPIRE', record, life)
end
return res
