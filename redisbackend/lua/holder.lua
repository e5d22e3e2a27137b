-- Helpers that read and prune the live holds of a lock, and re-enter it.

-- current_holder returns the owner of lock (false when it is free, after
-- deleting it if every hold lapsed), its live holds and their latest end,
-- dropping the holds whose lease ended by now (ms); then whether the lock
-- is marked as waited for, whether the lock key was there at all, whether
-- processes wait for it in turn (p: fields, see name_next), whether turn
-- (a p: field, or nil) is one of them, and the process a release woke for
-- its turn (its p: field, or false) and until when (µs) the others in line
-- leave the free lock to it. One HGETALL reads it
-- all: a refused attempt needs no other read of the lock (a busy lock
-- refuses an attempt on every hand-off).
local function current_holder(lock, now, turn)
  local fields = redis.call('HGETALL', lock)
  local holder, live, latest, lapsed, waited, turns, mine = false, 0, 0, {}, false, false, false
  local woken, wokenUntil = false, 0
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f == 'owner' then
      holder = fields[i + 1]
    elseif f == 'waited' then
      waited = true
    elseif f == 'woken' then
      woken = fields[i + 1]
    elseif f == 'wokenUntil' then
      wokenUntil = tonumber(fields[i + 1])
    else
      local kind = string.sub(f, 1, 2)
      if kind == 't:' then
        local ends = tonumber(fields[i + 1])
        if ends <= now then
          lapsed[#lapsed + 1] = f
        else
          live = live + 1
          if ends > latest then latest = ends end
        end
      elseif kind == 'p:' then
        turns = true
        if f == turn then mine = true end
      end
    end
  end
  local found = #fields > 0
  if not holder then
    return false, 0, 0, false, found, turns, mine, woken, wokenUntil
  end
  if live == 0 then
    redis.call('DEL', lock)
    return false, 0, 0, false, found, false, false, false, 0
  end
  if #lapsed > 0 then
    redis.call('HDEL', lock, unpack(lapsed))
  end
  return holder, live, latest, waited, found, turns, mine, woken, wokenUntil
end

-- reenter adds the hold of token (field hold) to a lock its owner already
-- holds (live holds ending at latest the latest) and returns the acquire
-- script's reply. A token that already has a live hold is a retry of an
-- acquire whose reply was lost: its lease starts again, and no hold is
-- added.
local function reenter(lock, hold, now, ttl, live, latest)
  local fence = tonumber(redis.call('HGET', lock, 'fence'))
  if redis.call('HSET', lock, hold, string.format('%d', now + ttl)) == 1 then
    live = live + 1
  end
  if now + ttl > latest then
    redis.call('PEXPIRE', lock, ttl)
  end
  return {1, fence, live}
end
