-- Puts back the claim that the claim of token replaced, if the tick record
-- still names token's claim (or deletes the record when there was none);
-- the record keeps its expiry.
--
-- KEYS: tick record    ARGV: token
-- Returns 1 when it undid the claim, 0 when the record names another.

local record = KEYS[1]
local last = redis.call('HMGET', record, 'token', 'ptick', 'ptoken')
if last[1] ~= ARGV[1] then
  return 0
end
if last[2] then
  redis.call('HSET', record, 'tick', last[2], 'token', last[3] or '')
  redis.call('HDEL', record, 'ptick', 'ptoken')
else
  redis.call('DEL', record)
end
return 1
