-- Helpers that let the processes that wait for a lock take turns (plain
-- waiters; fair ones have their line, queue.lua). A waiter's refused
-- attempt puts its process in line once, in the lock's hash (field p:ID,
-- the process's notifier id, valued the server time in µs when it got in
-- line). The release that frees the lock wakes the first process in line
-- alone, with "released:ID" on the lock's channel, instead of every
-- waiting process at once: one attempt per hand-off instead of one per
-- waiting process, of which all but one are refused (4.6 acquire scripts
-- per hand-off with 4 processes). It is a wake-up, not a grant: the lock
-- is free, and whoever reaches it first takes it. The other processes'
-- waiters wait for a later message, or try after otherTurnGrace when none
-- comes (the process named may have crashed).
--
-- They need take.lua and holder.lua. TURN_KEEP_MS is replaced by the Go
-- constant turnKeepMs when the script is built (scripts.go).

-- others_in_line reports whether a process other than process is in line
-- (turns, from holds_of).
local function others_in_line(turns, process)
  local own = 'p:' .. process
  for i = 1, #turns, 2 do
    if turns[i] ~= own then
      return true
    end
  end
  return false
end

-- name_next wakes the first process in line (turns, from holds_of) other
-- than process, the releasing one, and frees the lock: it drops the
-- holder's fields and the holds in drop, keeps the rest of the line (for
-- turnKeep ms), and marks whom it woke and until when (graceMs from now)
-- the others in line leave the free lock to it (the acquire script). With
-- processWaits, the releasing process gets in line again, last. It returns
-- nil when no other process is in line (nothing done), else whether the
-- releasing process is in line. Its writes do not grow with the line.
local function name_next(lock, channel, turns, process, processWaits, graceMs, drop)
  local own = 'p:' .. process
  local first, firstSince, others = nil, 0, 0
  for i = 1, #turns, 2 do
    local f, since = turns[i], turns[i + 1]
    if f ~= own then
      others = others + 1
      if not first or since < firstSince or (since == firstSince and f < first) then
        first, firstSince = f, since
      end
    end
  end
  if not first then
    return nil
  end
  local inLine = process ~= '' and processWaits
  if others == 1 and not inLine then
    redis.call('DEL', lock) -- the line is empty now
  else
    drop[#drop + 1] = first
    if not inLine then drop[#drop + 1] = own end
    redis.call('HDEL', lock, 'owner', 'fence', 'id', 'streak', unpack(drop))
    -- The waited mark stays: a client of an older version that takes the
    -- lock knows nothing of the line, and publishes on release only with it.
    local now = now_us()
    local wokenUntil = string.format('%d', now + graceMs * 1000)
    if inLine then
      redis.call('HSET', lock, 'waited', '1', own, string.format('%d', now), 'woken', first, 'wokenUntil', wokenUntil)
    else
      redis.call('HSET', lock, 'waited', '1', 'woken', first, 'wokenUntil', wokenUntil)
    end
    redis.call('PEXPIRE', lock, TURN_KEEP_MS)
  end
  redis.call('PUBLISH', channel, 'released:' .. string.sub(first, 3))
  return inLine
end
