-- The acquire script after its helpers (take.lua): acquire.lua is
-- take.lua and this. It reads KEYS and ARGV as the acquire script's:
-- the job-tick script runs it as a function whose parameters are named
-- KEYS and ARGV too (acquire_tick.lua).

local lock, counter, tombstone = KEYS[1], KEYS[2], KEYS[3]
local owner, hold, ttl, counterTTL, floor = ARGV[1], 't:' .. ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

local nowUs = now_us()

-- The uncontended case in one read: no lock key, no tombstone.
local present = redis.call('EXISTS', lock, tombstone)
if present == 0 then
  return take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, ARGV[7])
end

--#include holder.lua

local turn = nil
if ARGV[6] and ARGV[6] ~= '' then turn = 'p:' .. ARGV[6] end
local now = math.floor(nowUs / 1000)
local holder, live, latest, waited, found, turns, inLine, woken, wokenUntil = current_holder(lock, now, turn)

-- EXISTS counted the lock key and the tombstone: what the lock key (found
-- by HGETALL) does not account for is the tombstone.
if present > (found and 1 or 0) then
  -- A late copy of an acquire that its client gave up and released.
  if holder then return {0, 0, 0, latest - now} end
  return {0, 0, 0, -1}
end

if not holder then
  -- A process waiting in line does not take the lock from the one a
  -- release just woke for its turn, for turnGrace at most (that one may
  -- have crashed); a caller not in line may.
  local graceLeft = wokenUntil - nowUs
  if inLine and woken and woken ~= turn and graceLeft > 0 then
    return {0, 0, 0, math.ceil(graceLeft / 1000)}
  end
  return take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, ARGV[7], turns)
end

if holder == owner then
  return reenter(lock, hold, now, ttl, live, latest)
end

-- Someone waits: the release that frees the lock must publish. The mark is
-- written once per hold, not by every refused attempt; a waiting process
-- gets in line once.
if turn and not inLine then
  if waited then
    redis.call('HSET', lock, turn, string.format('%d', nowUs))
  else
    redis.call('HSET', lock, 'waited', '1', turn, string.format('%d', nowUs))
  end
elseif not waited then
  redis.call('HSET', lock, 'waited', '1')
end
return {0, 0, 0, latest - now}
