-- Helpers of the release and renewal scripts: one HGETALL gives them the
-- hold they act on, the other holds, and whether anyone waits.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- holds_of returns the lease end (ms) of hold, or nil when lock lacks it;
-- the other holds as a flat list {field, end, ...}; whether the lock is
-- marked as waited for; the processes waiting for it in turn (fields
-- p:ID, see name_next), as a flat list {field, since (µs), ...}, or nil;
-- and how many holds in a row the holder's process has handed on to its
-- own waiters during its turn (field streak, see turns.lua).
local function holds_of(lock, hold)
  local fields = redis.call('HGETALL', lock)
  local ends, others, waited, turns, streak = nil, {}, false, nil, 0
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f == hold then
      ends = tonumber(fields[i + 1])
    elseif f == 'waited' then
      waited = true
    elseif f == 'streak' then
      streak = tonumber(fields[i + 1])
    else
      local kind = string.sub(f, 1, 2)
      if kind == 't:' then
        others[#others + 1] = f
        others[#others + 1] = tonumber(fields[i + 1])
      elseif kind == 'p:' then
        turns = turns or {}
        turns[#turns + 1] = f
        turns[#turns + 1] = tonumber(fields[i + 1])
      end
    end
  end
  return ends, others, waited, turns, streak
end
