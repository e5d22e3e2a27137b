-- Helpers of the line of fair waiters (fencelock.WithFairness, fair.go),
-- shared by the fair acquire script and the release script. The line is a
-- sorted set of waiter tokens by arrival (queue), and a hash of the moment
-- (server ms) each place lapses unless its waiter renews it (queueEnds).

-- queue_head drops the places at the head of the line that lapsed by now
-- (ms) and returns the first live one: its token and the end of its place;
-- nil when the line is empty (its keys are then deleted).
local function queue_head(queue, queueEnds, now)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      redis.call('DEL', queueEnds)
      return nil, 0
    end
    local ends = tonumber(redis.call('HGET', queueEnds, head) or '0')
    if ends > now then
      return head, ends
    end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', queueEnds, head, 'g:' .. head)
  end
end

-- leave_line removes token's place, and reports whether it had one.
local function leave_line(queue, queueEnds, token)
  if redis.call('ZREM', queue, token) == 0 then
    return false
  end
  redis.call('HDEL', queueEnds, token, 'g:' .. token)
  return true
end

-- wake_next tells the first live waiter of the line that its turn has come
-- ("next:TOKEN"); with an empty line and anyone set, it tells every waiter
-- that the lock is free ("released").
local function wake_next(queue, queueEnds, channel, now, anyone)
  local head = queue_head(queue, queueEnds, now)
  if head then
    redis.call('PUBLISH', channel, 'next:' .. head)
  elseif anyone then
    redis.call('PUBLISH', channel, 'released')
  end
end
