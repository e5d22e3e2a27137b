-- Gives up token's hold of a semaphore or read-write lock, or withdraws
-- its place. It publishes "released", if an acquire was refused since the
-- last message, when the release may let a waiter in: any permit of a
-- semaphore; the writer, the last reader, the last intent or the last
-- admitted reader of a read-write lock. The writer's release admits the
-- readers waiting.
--
-- KEYS: holds, info, tombstone, writers, readers, admitted (the last three
--       unused by semaphores)
-- ARGV: token, channel, tombstone (ms, 0: none), rw (1 for a read-write lock)
-- Returns 0 when the token's hold was live and is released, -1 when not.

--#include take.lua
--#include holder.lua
--#include holds.lua

local holds, info, tombstone = KEYS[1], KEYS[2], KEYS[3]
local writers, readers, admitted = KEYS[4], KEYS[5], KEYS[6]
local token, channel, tombstoneMs, rw = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
if tombstoneMs > 0 then
  redis.call('SET', tombstone, '1', 'PX', tombstoneMs)
end
local now = math.floor(now_us() / 1000)
local ends = redis.call('ZSCORE', holds, token)
local wasWriter = false
if ends then
  redis.call('ZREM', holds, token)
  redis.call('HDEL', info, 'f:' .. token)
  if redis.call('HGET', info, 'writer') == token then
    redis.call('HDEL', info, 'writer')
    wasWriter = true
  end
end
local wake = ends ~= false
if rw then
  local intent = redis.call('ZREM', writers, token) == 1
  redis.call('ZREM', readers, token)
  local wasAdmitted = redis.call('ZREM', admitted, token) == 1
  prune_holds(holds, info, now)
  prune_places(writers, readers, admitted, now)
  if wasWriter then
    -- The readers' turn: those waiting go in before the next writer.
    redis.call('ZUNIONSTORE', admitted, 2, admitted, readers, 'AGGREGATE', 'MAX')
    redis.call('DEL', readers)
  end
  local free = redis.call('ZCARD', holds) == 0 and redis.call('ZCARD', admitted) == 0
  wake = wasWriter or (ends and free) or (wasAdmitted and free) or
    (intent and redis.call('ZCARD', writers) == 0)
else
  prune_holds(holds, info, now)
end
if wake and redis.call('HDEL', info, 'waited') == 1 then
  redis.call('PUBLISH', channel, 'released')
end
keep_alive(info, {holds, writers, readers, admitted}, now)
if not ends or tonumber(ends) <= now then
  return -1
end
return 0
