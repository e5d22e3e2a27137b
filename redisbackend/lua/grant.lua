-- Helpers that hand the free lock to the first waiter of the line
-- (fencelock.FairGranter). They need take.lua (now_us, take).

-- grant_next gives the free lock to the first live waiter of the line if
-- it accepts grants (its place has a g:TOKEN field: the owner, lease,
-- fence floor, identity, latest attempt and own channel of that waiter, in
-- JSON, as strings), and tells it ("grant:TOKEN:FENCE:SEQ") on its own
-- channel (the key's channel for a waiter without one); otherwise it wakes
-- it as wake_next does.
--
-- It reads the first two places of the line at once (ZRANGE 0 1) and the
-- head's place end and grant with one HMGET: a grant in a busy line is on
-- every hand-off's path, so it makes no call it can do without.
-- A second place, even one that has lapsed, marks the granted hold as
-- waited for, so that its release hands on the lock (a mark too many costs
-- that release a message).
local function grant_next(lock, counter, queue, queueEnds, channel, counterTTL, anyone)
  local nowUs = now_us()
  local now = math.floor(nowUs / 1000)
  while true do
    local first = redis.call('ZRANGE', queue, 0, 1)
    local head = first[1]
    if not head then
      redis.call('DEL', queueEnds)
      if anyone then
        redis.call('PUBLISH', channel, 'released')
      end
      return
    end
    local place = redis.call('HMGET', queueEnds, head, 'g:' .. head)
    if tonumber(place[1] or '0') > now then
      if not place[2] then
        redis.call('PUBLISH', channel, 'next:' .. head)
        return
      end
      local g = cjson.decode(place[2])
      local others = first[2] ~= nil
      redis.call('ZREM', queue, head)
      if others then
        redis.call('HDEL', queueEnds, head, 'g:' .. head)
      else
        redis.call('DEL', queueEnds)
      end
      local fence = take(lock, counter, g.o, 't:' .. head, nowUs, tonumber(g.l), tonumber(g.f), counterTTL, g.i, others)
      redis.call('PUBLISH', g.c or channel, 'grant:' .. head .. ':' .. string.format('%d', fence) .. ':' .. g.s)
      return
    end
    -- The head's place lapsed: drop it and look at the next.
    redis.call('ZREM', queue, head)
    redis.call('HDEL', queueEnds, head, 'g:' .. head)
  end
end
