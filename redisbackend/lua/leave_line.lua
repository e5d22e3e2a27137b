-- Takes a process out of the lock's line when none of its waiters waits
-- for the lock any more (they took it or gave up). If a release woke it
-- for its turn meanwhile, it lifts the others' grace and, while the lock
-- is free, wakes every waiter, so that the others need not wait out the
-- grace.
--
-- KEYS: lock    ARGV: channel, process
-- Returns 0.

local lock, own = KEYS[1], 'p:' .. ARGV[2]
redis.call('HDEL', lock, own)
if redis.call('HGET', lock, 'woken') == own then
  redis.call('HDEL', lock, 'woken', 'wokenUntil')
  if redis.call('HEXISTS', lock, 'owner') == 0 then
    redis.call('PUBLISH', ARGV[1], 'released')
  end
end
return 0
