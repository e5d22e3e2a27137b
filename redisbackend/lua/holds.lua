-- Helpers of the hold scripts of semaphores and read-write locks (their key
-- layout is described in holds.go). They need take.lua's now_us and
-- mint_fence.

-- prune_holds drops the holds whose lease ended by now (ms), with their
-- fences, and the writer mark of a writer whose hold is gone. The holds
-- set may have expired as a whole (it expires with its latest lease) while
-- places keep info alive: then no hold is left to find lapsed, and the
-- marks of info are checked against the set all the same.
local function prune_holds(holds, info, now)
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', holds, '-inf', now)
    for i = 1, #gone do
      redis.call('HDEL', info, 'f:' .. gone[i])
    end
  end
  if redis.call('ZCARD', holds) == 0 then
    -- No live hold: no fence or writer mark of info is anyone's.
    local fields = redis.call('HKEYS', info)
    for i = 1, #fields do
      if fields[i] == 'writer' or string.sub(fields[i], 1, 2) == 'f:' then
        redis.call('HDEL', info, fields[i])
      end
    end
    return
  end
  local writer = redis.call('HGET', info, 'writer')
  if writer and not redis.call('ZSCORE', holds, writer) then
    redis.call('HDEL', info, 'writer')
  end
end

-- prune_places drops the places (of a read-write lock) that lapsed by now.
local function prune_places(writers, readers, admitted, now)
  redis.call('ZREMRANGEBYSCORE', writers, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', admitted, '-inf', now)
end

-- last_score is the highest score of a sorted set, or 0 when it is empty.
local function last_score(set)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if #last == 0 then return 0 end
  return tonumber(last[2])
end

-- first_score is the lowest score of a sorted set, or nil when it is empty.
local function first_score(set)
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if #first == 0 then return nil end
  return tonumber(first[2])
end

-- keep_alive makes each sorted set of sets (the holds and the places)
-- expire with its latest entry, and info with the latest of all; with no
-- entry left, info is deleted.
local function keep_alive(info, sets, now)
  local latest = 0
  for i = 1, #sets do
    local last = last_score(sets[i])
    if last > now then
      redis.call('PEXPIRE', sets[i], last - now)
      if last > latest then latest = last end
    end
  end
  if latest <= now then
    redis.call('DEL', info)
    return
  end
  redis.call('PEXPIRE', info, latest - now)
end

-- grant gives token a new hold with a new fence, and returns the acquire
-- scripts' reply.
local function grant(holds, info, sets, counter, token, nowUs, ttl, floor, counterTTL)
  local fence = mint_fence(counter, nowUs, floor, counterTTL)
  local now = math.floor(nowUs / 1000)
  redis.call('ZADD', holds, now + ttl, token)
  redis.call('HSET', info, 'f:' .. token, string.format('%d', fence))
  keep_alive(info, sets, now)
  return {1, fence, 1}
end

-- retry_hold restarts the lease of token's live hold (an acquire whose
-- reply was lost, sent again) and returns the acquire reply; nil when token
-- holds nothing.
local function retry_hold(holds, info, sets, token, now, ttl)
  if not redis.call('ZSCORE', holds, token) then return nil end
  redis.call('ZADD', holds, now + ttl, token)
  keep_alive(info, sets, now)
  return {1, tonumber(redis.call('HGET', info, 'f:' .. token)), 1}
end

-- refuse marks the keys as waited for (the next release that may let a
-- waiter in publishes) and returns the acquire reply of a refusal, with
-- wait ms until something may change (-1: unknown).
local function refuse(info, sets, now, wait)
  redis.call('HSET', info, 'waited', '1')
  keep_alive(info, sets, now)
  return {0, 0, 0, wait}
end
