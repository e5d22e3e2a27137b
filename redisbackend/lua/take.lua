-- Helpers that take a free lock: the acquire script's uncontended path
-- needs only these. Lua makes a closure of every helper each time a script
-- runs, so a script includes the others (holder.lua) after its uncontended
-- path has returned: about 2 µs of Redis time per acquire and 4 per release
-- on the project's machine (BenchmarkAcquireScriptSteps).

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- mint_fence returns a new fencing token for a lock whose counter is
-- counter: one more than the last one, but at least the server's clock in
-- microseconds and above the client's floor. Usually the clock is ahead of
-- the counter: one GETSET. When the counter is ahead (a clock stepped
-- back), a second write corrects it.
local function mint_fence(counter, nowUs, floor, counterTTL)
  local fence = math.max(nowUs, floor + 1)
  local last = tonumber(redis.call('GETSET', counter, string.format('%d', fence)) or 0)
  if last >= fence then
    fence = last + 1
    redis.call('SET', counter, string.format('%d', fence))
  end
  if counterTTL > 0 then
    redis.call('PEXPIRE', counter, counterTTL)
  end
  return fence
end

-- take gives the free lock to owner's new hold (field hold) with a new
-- fence, records the holder's identity (field id) when there is one, marks
-- the lock as waited for when waited is set (a grant with others in line),
-- and returns the fence: the acquire script's whole reply when it takes a
-- free lock, since a table costs Redis more to return than an integer
-- (about 0.5 µs of the script's 10 on the project's machine).
local function take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, identity, waited)
  local fence = mint_fence(counter, nowUs, floor, counterTTL)
  local now = math.floor(nowUs / 1000)
  local fenceStr, endStr = string.format('%d', fence), string.format('%d', now + ttl)
  if waited then
    local fields = {'owner', owner, 'fence', fenceStr, hold, endStr, 'waited', '1'}
    if identity then
      fields[#fields + 1] = 'id'
      fields[#fields + 1] = identity
    end
    redis.call('HSET', lock, unpack(fields))
  elseif identity then
    redis.call('HSET', lock, 'owner', owner, 'fence', fenceStr, hold, endStr, 'id', identity)
  else
    redis.call('HSET', lock, 'owner', owner, 'fence', fenceStr, hold, endStr)
  end
  redis.call('PEXPIRE', lock, ttl)
  return fence
end
