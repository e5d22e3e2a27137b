-- Makes the lock's fence counter at least fence, and, if token holds the
-- lock, makes fence its fence. A quorum backend (the redlock package) uses
-- it after an acquisition on several masters: the lock's fence is the
-- largest any of them minted, and every master of the majority must mint
-- a larger one next time.
--
-- KEYS: lock, fence counter    ARGV: fence, token, counter expiry (ms, 0: none)
-- Returns 1 when token holds the lock, 0 when not.

local lock, counter = KEYS[1], KEYS[2]
local fence, hold, counterTTL = tonumber(ARGV[1]), 't:' .. ARGV[2], tonumber(ARGV[3])
if tonumber(redis.call('GET', counter) or 0) < fence then
  redis.call('SET', counter, string.format('%d', fence))
end
if counterTTL > 0 then
  redis.call('PEXPIRE', counter, counterTTL)
end
if redis.call('HEXISTS', lock, hold) == 0 then
  return 0
end
redis.call('HSET', lock, 'fence', string.format('%d', fence))
return 1
