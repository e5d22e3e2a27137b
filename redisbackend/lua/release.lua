-- Drops one hold, if the lock has it and its lease is running; the last
-- hold deletes the lock and, if an acquire found it held meanwhile, wakes
-- waiters: the first of the line of fair waiters if there is one
-- ("next:TOKEN"), every waiter otherwise ("released"). A token that holds
-- nothing but has a place in the line leaves the line (a fair waiter gave
-- up), waking the next one if the lock is free. With a tombstone time, it
-- first records that acquires with this token must be refused. One read of
-- the hash serves the whole script: uncontended, it runs HGETALL and DEL.
-- A lone hold needs no clock read: the lock key expires when the latest of
-- its holds ends, so finding the key means a lone hold's lease runs.
--
-- When the first waiter of the line accepts grants (fencelock.FairGranter),
-- the release that frees the lock takes it for that waiter instead of
-- waking it (grant_next), minting its fence with the fence counter.
--
-- With a next request (fencelock.HandOffBackend: a waiter of the same
-- Client), a release that frees the lock nobody else asked for (no waited
-- mark: no acquire was refused while it was held, and no fair waiter is in
-- line) takes it for that request in the same step, as the acquire script
-- would take a free lock: the hand-off costs one script run where a
-- release and an acquire cost two, and the waiter no round trip.
--
-- KEYS: lock, tombstone, queue, queue ends, fence counter[, next's tombstone]
-- ARGV: token, channel, tombstone (ms, 0: none), counter expiry (ms, 0: none),
--       process ("": none), whether it has waiters ("1" or "0"), turn grace (ms)
--       [, next's token, ttl (ms), fence floor[, identity]]
-- Returns the live holds left, or -1 when the lock did not have this hold;
-- with a next request, {that, the fence handed to next or 0}; and
-- {that, 0, 1} (with or without a next request) when the release woke
-- another process whose turn it was (name_next) while the releasing
-- process's own waiters wait their turn.
--
-- The process is the id of the releasing Client's notifier: a release that
-- frees a lock that other processes wait for in turn wakes the first of
-- them alone, and lines the releasing process up behind the others when
-- it has waiters of its own (name_next).
--
-- TURN_HOLDS_MAX is replaced by the Go constant turnHoldsMax when the
-- script is built (scripts.go).

--#include holds_of.lua

local lock, token = KEYS[1], ARGV[1]
local hold = 't:' .. token
local ends, others, waited, turns, streak = holds_of(lock, hold)
-- The common cases, before any other helper is defined: a lone hold that
-- nobody waited for, and no tombstone to set. (While the key exists, a
-- lone hold's lease runs: see below.) The lock is freed and, with a next
-- request, taken for it unless that request was given up (its tombstone).
if ends and #others == 0 and not waited and not turns and ARGV[3] == '0' then
  redis.call('DEL', lock)
  if not ARGV[8] then
    return 0
  end
  if redis.call('EXISTS', KEYS[6]) == 1 then
    return {0, 0}
  end
  --#include take.lua
  local fence = take(lock, KEYS[5], ARGV[8], 't:' .. ARGV[8], now_us(), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[4]), ARGV[11])
  return {0, fence}
end

--#include take.lua
--#include holder.lua
--#include queue.lua
--#include grant.lua
--#include turns.lua

local tombstone, queue, queueEnds, counter = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local channel, tombstoneMs, counterTTL = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local process, processWaits, graceMs = ARGV[5], ARGV[6] == '1', tonumber(ARGV[7])
local nextToken = ARGV[8]
if tombstoneMs > 0 then
  redis.call('SET', tombstone, '1', 'PX', tombstoneMs)
end
local function reply(left, handed, yielded)
  if yielded then return {left, handed, 1} end
  if nextToken then return {left, handed} end
  return left
end
if not ends then
  if leave_line(queue, queueEnds, token) then
    local now = now_ms()
    local held = false
    for i = 2, #others, 2 do
      if others[i] > now then held = true end
    end
    if not held then
      grant_next(lock, counter, queue, queueEnds, channel, counterTTL, false)
    end
  end
  return reply(-1, 0)
end
-- A lone hold needs no clock read. The lock key expires when the latest of
-- its holds ends (every script that sets a hold's end sets the key's expiry
-- to the latest), so while the key exists a lone hold's lease runs.
local now = nil
local live, latest, drop = 0, 0, {hold}
if #others > 0 then
  now = now_ms()
  for i = 1, #others, 2 do
    if others[i + 1] > now then
      live = live + 1
      if others[i + 1] > latest then latest = others[i + 1] end
    else
      drop[#drop + 1] = others[i]
    end
  end
end
local left = live
if now and ends <= now then
  left = -1
end
if live == 0 then
  -- Processes waiting in turn go after the line of fair waiters, if any.
  if turns and others_in_line(turns, process) and redis.call('EXISTS', queue) == 0 then
    if nextToken and left == 0 and streak < TURN_HOLDS_MAX and redis.call('EXISTS', KEYS[6]) == 0 then
      -- The releasing process's turn goes on: its next waiter gets the
      -- lock (take writes the holder's fields anew), and the line stays.
      redis.call('HDEL', lock, 'id', unpack(drop))
      local fence = take(lock, counter, nextToken, 't:' .. nextToken, now_us(), tonumber(ARGV[9]), tonumber(ARGV[10]), counterTTL, ARGV[11], true)
      redis.call('HSET', lock, 'streak', string.format('%d', streak + 1))
      return reply(0, fence)
    end
    local yielded = name_next(lock, channel, turns, process, processWaits, graceMs, drop)
    if yielded ~= nil then
      return reply(left, 0, yielded)
    end
  end
  redis.call('DEL', lock)
  if waited or turns then
    grant_next(lock, counter, queue, queueEnds, channel, counterTTL, true)
  elseif nextToken and left == 0 and redis.call('EXISTS', KEYS[6]) == 0 then
    local fence = take(lock, counter, nextToken, 't:' .. nextToken, now_us(), tonumber(ARGV[9]), tonumber(ARGV[10]), counterTTL, ARGV[11])
    return reply(0, fence)
  end
else
  redis.call('HDEL', lock, unpack(drop))
  redis.call('PEXPIRE', lock, latest - now)
end
return reply(left, 0)
