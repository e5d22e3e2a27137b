-- Takes a permit of a semaphore when fewer than the caller's number of
-- permits are live, minting its fence; a token that holds a live permit
-- restarts its lease (a retry). A refusal marks the semaphore as waited
-- for.
--
-- KEYS: holds, info, fence counter, tombstone
-- ARGV: token, ttl (ms), counter expiry (ms, 0: none), fence floor, permits
-- Returns {1, fence, 1} when taken; when not, {0, 0, 0, ms until the
-- earliest permit's lease ends, or -1}.

--#include take.lua
--#include holder.lua
--#include holds.lua

local holds, info, counter, tombstone = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, counterTTL, floor, permits = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local sets = {holds}

local nowUs = now_us()
local now = math.floor(nowUs / 1000)
prune_holds(holds, info, now)

local first = first_score(holds)
if redis.call('EXISTS', tombstone) == 1 then
  -- A late copy of an acquire that its client gave up and released.
  if first then return {0, 0, 0, first - now} end
  return {0, 0, 0, -1}
end

local again = retry_hold(holds, info, sets, token, now, ttl)
if again then return again end

if redis.call('ZCARD', holds) < permits then
  return grant(holds, info, sets, counter, token, nowUs, ttl, floor, counterTTL)
end
return refuse(info, sets, now, first - now)
