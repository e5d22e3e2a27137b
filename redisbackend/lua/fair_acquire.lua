-- The acquire script (acquire.lua) for a waiter in the line of fair
-- waiters: the free lock goes to the first live waiter of the line (or to
-- anyone when the line is empty). A refused waiter joins the line, or
-- renews its place, for place ms (0: it does not join, as for
-- TryAcquire). Re-entry by the owner does not wait in line, and leaves it.
--
-- KEYS: lock, fence counter, tombstone, queue, queue ends
-- ARGV: owner, token, ttl (ms), counter expiry (ms, 0: none), fence floor, place (ms), channel,
--       grant (ms, 0: no grants), attempt number, the waiter's own channel ("": none)[, identity]
-- Returns the new fence alone when it takes the free lock (take.lua),
-- {1, fence, holds} when it re-enters; when not held, {0, 0, 0, ms until
-- the holder's lease or the first waiter's place ends, or -1}.
--
-- Uncontended (no lock, no tombstone, no line: one EXISTS of the three), it
-- runs the commands the acquire script runs, and includes the helpers of
-- the line only after that path has returned.
--
-- A waiter that accepts grants (fencelock.FairGranter) leaves with its
-- place what a release needs to take the lock for it and the channel to
-- tell it on (field g:TOKEN, see grant.lua); it is rewritten by each
-- attempt, so it names the latest attempt the server handled.

--#include take.lua

local lock, counter, tombstone, queue, queueEnds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, token, ttl, counterTTL, floor = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local place, channel = tonumber(ARGV[6]), ARGV[7]
local hold = 't:' .. token

local nowUs = now_us()

-- The uncontended case in one read, as in acquire.lua: no lock key, no
-- tombstone, no line. The tombstone is named twice, so that the count
-- tells it apart from the line below.
local present = redis.call('EXISTS', lock, queue, tombstone, tombstone)
if present == 0 then
  return take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, ARGV[11])
end

--#include holder.lua
--#include queue.lua

local now = math.floor(nowUs / 1000)
local holder, live, latest, waited, found = current_holder(lock, now)

-- Besides the lock key (found by HGETALL), EXISTS counted the line once
-- and the tombstone twice: 2 or more is a tombstone.
if present - (found and 1 or 0) >= 2 then
  -- A late copy of an acquire that its client gave up and released.
  leave_line(queue, queueEnds, token)
  if holder then return {0, 0, 0, latest - now} end
  return {0, 0, 0, -1}
end

if holder and holder == owner then
  -- No place left in line to hold the lock back, or be granted it, later.
  leave_line(queue, queueEnds, token)
  return reenter(lock, hold, now, ttl, live, latest)
end

-- The line matters only to a free lock: while it is held, the release
-- that frees it (grant_next) drops the lapsed places at the head.
local head, headEnds = nil, 0
if not holder then
  head, headEnds = queue_head(queue, queueEnds, now)
  if not head or head == token then
    local fence = take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, ARGV[11])
    if head then
      leave_line(queue, queueEnds, token)
      if redis.call('EXISTS', queue) == 1 then
        -- Others wait in line: this hold's release must wake the next.
        redis.call('HSET', lock, 'waited', '1')
      else
        redis.call('DEL', queueEnds)
      end
    end
    return fence
  end
end

if place > 0 then
  -- Joins at the end of the line, or keeps its place (NX): a busy line's
  -- waiters join far more often than they renew.
  redis.call('ZADD', queue, 'NX', redis.call('HINCRBY', queueEnds, '#seq', 1), token)
  local grant = tonumber(ARGV[8])
  if grant > 0 then
    local g = {o = owner, l = ARGV[8], f = ARGV[5], s = ARGV[9]}
    if ARGV[10] ~= '' then g.c = ARGV[10] end
    if ARGV[11] then g.i = ARGV[11] end
    redis.call('HSET', queueEnds, token, string.format('%d', now + place), 'g:' .. token, cjson.encode(g))
  else
    redis.call('HSET', queueEnds, token, string.format('%d', now + place))
  end
  -- The line's keys outlive every place in it: each place ends at most
  -- place ms from now. They are refreshed to twice that, so that in a busy
  -- line one join in many refreshes them, not every one; never
  -- shortened, whatever place other waiters use.
  if redis.call('PTTL', queue) < place then
    redis.call('PEXPIRE', queue, 2 * place)
    redis.call('PEXPIRE', queueEnds, 2 * place)
  end
end

if holder then
  -- Someone waits: the release that frees the lock must wake the line.
  if not waited then
    redis.call('HSET', lock, 'waited', '1')
  end
  return {0, 0, 0, latest - now}
end
-- Free, and another waiter's turn: remind it, in case the message that
-- told it was lost (it also comes back on its own before its place lapses).
redis.call('PUBLISH', channel, 'next:' .. head)
return {0, 0, 0, headEnds - now}
