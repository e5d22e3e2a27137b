package redisbackend

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Every script gets the keys it touches in KEYS (all in one hash slot) and
// takes one round trip. Field names are described in keys.go.
//
// Each hold has a lease of its own: its field t:TOKEN holds the server time
// (ms) at which it ends, and the lock key expires with the latest of them.
// Every script first drops the holds whose lease has ended (prune), so a
// lapsed re-entrant hold never keeps the lock alive.

// holdsOf is shared by the release and renewal scripts: one HGETALL gives
// them the hold they act on, the other holds, and whether anyone waits.
const holdsOf = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- holds_of returns the lease end (ms) of hold, or nil when lock lacks it;
-- the other holds as a flat list {field, end, ...}; whether the lock is
-- marked as waited for; the processes waiting for it in turn (fields
-- p:ID, see name_next), as a flat list {field, since (µs), ...}, or nil;
-- and how many holds in a row the holder's process has handed on to its
-- own waiters during its turn (field streak, see turnFunctions).
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
`

// takeFunctions are the helpers that take a free lock: the acquire script's
// uncontended path needs only these. Lua makes a closure of every helper
// each time a script runs, so a script defines the others (holderFunctions)
// after its uncontended path has returned: about 2 µs of Redis time per
// acquire and 4 per release on the project's machine
// (BenchmarkAcquireScriptSteps).
const takeFunctions = `
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
-- and returns the acquire script's reply.
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
  return {1, fence, 1}
end
`

// holderFunctions are the helpers that read and prune the live holds of a
// lock, and re-enter it.
const holderFunctions = `
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
`

// prelude is shared by the scripts that need the time or the live holds.
const prelude = takeFunctions + holderFunctions

// turnFunctions let the processes that wait for a lock take turns (plain
// waiters; fair ones have their line, fair.go). A waiter's refused attempt
// puts its process in line once, in the lock's hash (field p:ID, the
// process's notifier id, valued the server time in µs when it got in
// line). The release that frees the lock wakes the first process in line
// alone, with "released:ID" on the lock's channel, instead of every
// waiting process at once: one attempt per hand-off instead of one per
// waiting process, of which all but one are refused (4.6 acquire scripts
// per hand-off with 4 processes). It is a wake-up, not a grant:
// the lock is free, and whoever reaches it first takes it. The other
// processes' waiters wait for a later message, or try after
// otherTurnGrace when none comes (the process named may have crashed).
// They need prelude.
var turnFunctions = `
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
    redis.call('PEXPIRE', lock, ` + strconv.Itoa(turnKeepMs) + `)
  end
  redis.call('PUBLISH', channel, 'released:' .. string.sub(first, 3))
  return inLine
end
`

// leaveLineScript takes a process out of the lock's line when none of its
// waiters waits for the lock any more (they took it or gave up). If a
// release woke it for its turn meanwhile, it lifts the others' grace and,
// while the lock is free, wakes every waiter, so that the others need not
// wait out the grace.
//
//	KEYS: lock    ARGV: channel, process
var leaveLineScript = newScript(`
local lock, own = KEYS[1], 'p:' .. ARGV[2]
redis.call('HDEL', lock, own)
if redis.call('HGET', lock, 'woken') == own then
  redis.call('HDEL', lock, 'woken', 'wokenUntil')
  if redis.call('HEXISTS', lock, 'owner') == 0 then
    redis.call('PUBLISH', ARGV[1], 'released')
  end
end
return 0
`)

// turnHoldsMax is how many holds in a row a process whose turn it is may
// hand on to its own waiters (fencelock.HandOffBackend) before it wakes
// the next process in line: each such hand-off costs one script run and
// no message, where waking another process costs a message and that
// process's attempt, so a turn of a few holds keeps a busy lock busier,
// and the others wait for at most this many holds of each process before
// theirs. Measured (bench/peers, 4 processes × 4 workers,
// hold 1 ms, think 1 ms, 3 rounds of each in turns, 2026-12-02):
// hand-offs/s and p99 wait 586–607 and 38–44 ms with 2, 612–636 and
// 31–39 ms with 4, 649–682 and 48–49 ms with 8, 656–692 and 82–89 ms with
// 16. 4 is about one hold per waiter of a process there, and keeps the
// p99 within 40 ms.
const turnHoldsMax = 4

// turnKeepMs is how long (ms) a free lock keeps its line of waiting
// processes (turnFunctions): the process woken takes the lock in far less,
// and the lock's lease then keeps the line. A line left when every process
// in it has gone lasts no longer.
const turnKeepMs = 5000

// acquireScript takes a free lock, re-enters a lock held by the same owner,
// or reports the holder's remaining lease and marks the lock as waited for
// (so that its release wakes waiters). A token with a tombstone (its client
// gave the acquire up) is refused.
//
//	KEYS: lock, fence counter, tombstone
//	ARGV: owner, token, ttl (ms), counter expiry (ms, 0: none), fence floor[, process, identity]
//	returns {1, fence, holds} when held, {0, 0, 0, holder's remaining lease (ms), or -1} when not.
//
// The process is the id of the caller's notifier when it waits for the
// lock (a waiter of that process watches its releases), "" otherwise: a
// refused attempt then lines the process up for its turn (field p:ID, see
// name_next), unless it is in line already. An attempt that takes the
// lock while processes wait in turn marks it as waited for, so that its
// release wakes the next.
//
// Uncontended (no lock key, no tombstone, found by one EXISTS of both), it
// runs TIME, EXISTS, GETSET, HSET and PEXPIRE: Redis spends about as much
// on each command a script calls as on the script call itself, so the
// uncontended path makes no call it can do without.
//
// The identity (fencelock.WithIdentity) is sent only when set, and stored
// (field id, in the same HSET) only by the acquisition that takes the free
// lock: a Client without one costs no byte more.
//
// The fencing token is minted in the same step as the acquire: one more than
// the last one, but at least the server's clock in microseconds and above the
// client's floor (the largest fence it has seen), so tokens keep growing
// after a restart that lost the counter (no persistence) or a failover to a
// replica that missed it.
var acquireScript = newScript(takeFunctions + acquireBody)

// acquireBody is the acquire script after its helpers (takeFunctions). It
// reads KEYS and ARGV as the acquire script's: the job-tick script runs it
// as a function whose parameters are named KEYS and ARGV too
// (acquireTickScript).
const acquireBody = `
local lock, counter, tombstone = KEYS[1], KEYS[2], KEYS[3]
local owner, hold, ttl, counterTTL, floor = ARGV[1], 't:' .. ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

local nowUs = now_us()

-- The uncontended case in one read: no lock key, no tombstone.
local present = redis.call('EXISTS', lock, tombstone)
if present == 0 then
  return take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, ARGV[7])
end
` + holderFunctions + `
local turn = nil
if ARGV[6] and ARGV[6] ~= '' then turn = 'p:' .. ARGV[6] end
local now = math.floor(nowUs / 1000)
local holder, live, latest, waited, found, turns, inLine, woken, wokenUntil = current_holder(lock, now, turn)

-- EXISTS counted the lock key and the tombstone: what the lock key (found
-- by HGETALL) does not account for is the tombstone.
if present > (found and 1 or 0) then
  -- A late copy of an acquire that its client gave up and released.
  if holder then return {0, 0, 0, latest - now} end
  return {0, 0, 0, -1}
end

if not holder then
  -- A process waiting in line does not take the lock from the one a
  -- release just woke for its turn, for turnGrace at most (that one may
  -- have crashed); a caller not in line may.
  local graceLeft = wokenUntil - nowUs
  if inLine and woken and woken ~= turn and graceLeft > 0 then
    return {0, 0, 0, math.ceil(graceLeft / 1000)}
  end
  return take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, ARGV[7], turns)
end

if holder == owner then
  return reenter(lock, hold, now, ttl, live, latest)
end

-- Someone waits: the release that frees the lock must publish. The mark is
-- written once per hold, not by every refused attempt; a waiting process
-- gets in line once.
if turn and not inLine then
  if waited then
    redis.call('HSET', lock, turn, string.format('%d', nowUs))
  else
    redis.call('HSET', lock, 'waited', '1', turn, string.format('%d', nowUs))
  end
elseif not waited then
  redis.call('HSET', lock, 'waited', '1')
end
return {0, 0, 0, latest - now}
`

// releaseScript drops one hold, if the lock has it and its lease is running;
// the last hold deletes the lock and, if an acquire found it held meanwhile,
// wakes waiters: the first of the line of fair waiters if there is one
// ("next:TOKEN"), every waiter otherwise ("released"). A token that holds
// nothing but has a place in the line leaves the line (a fair waiter gave
// up), waking the next one if the lock is free. With a tombstone time, it
// first records that acquires with this token must be refused. One read of
// the hash serves the whole script: uncontended, it runs HGETALL and DEL.
// A lone hold needs no clock read: the lock key expires when the latest of
// its holds ends, so finding the key means a lone hold's lease runs.
//
// When the first waiter of the line accepts grants (fencelock.FairGranter),
// the release that frees the lock takes it for that waiter instead of
// waking it (grant_next), minting its fence with the fence counter.
//
// With a next request (fencelock.HandOffBackend: a waiter of the same
// Client), a release that frees the lock nobody else asked for (no waited
// mark: no acquire was refused while it was held, and no fair waiter is in
// line) takes it for that request in the same step, as the acquire script
// would take a free lock: the hand-off costs one script run where a
// release and an acquire cost two, and the waiter no round trip.
//
//	KEYS: lock, tombstone, queue, queue ends, fence counter[, next's tombstone]
//	ARGV: token, channel, tombstone (ms, 0: none), counter expiry (ms, 0: none),
//	      process ("": none), whether it has waiters ("1" or "0"), turn grace (ms)
//	      [, next's token, ttl (ms), fence floor[, identity]]
//	returns the live holds left, or -1 when the lock did not have this hold;
//	with a next request, {that, the fence handed to next or 0}; and
//	{that, 0, 1} (with or without a next request) when the release woke
//	another process whose turn it was (name_next) while the releasing
//	process's own waiters wait their turn.
//
// The process is the id of the releasing Client's notifier: a release that
// frees a lock that other processes wait for in turn wakes the first of
// them alone, and lines the releasing process up behind the others when
// it has waiters of its own (name_next).
var releaseScript = newScript(holdsOf + `
local lock, token = KEYS[1], ARGV[1]
local hold = 't:' .. token
local ends, others, waited, turns, streak = holds_of(lock, hold)
-- The common cases, before any other helper is defined: a lone hold that
-- nobody waited for, and no tombstone to set. (While the key exists, a
-- lone hold's lease runs: see below.) The lock is freed and, with a next
-- request, taken for it unless that request was given up (its tombstone).
if ends and #others == 0 and not waited and not turns and ARGV[3] == '0' then
  redis.call('DEL', lock)
  if not ARGV[8] then
    return 0
  end
  if redis.call('EXISTS', KEYS[6]) == 1 then
    return {0, 0}
  end
` + takeFunctions + `
  local taken = take(lock, KEYS[5], ARGV[8], 't:' .. ARGV[8], now_us(), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[4]), ARGV[11])
  return {0, taken[2]}
end
` + prelude + queueFunctions + grantFunctions + turnFunctions + `
local tombstone, queue, queueEnds, counter = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local channel, tombstoneMs, counterTTL = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local process, processWaits, graceMs = ARGV[5], ARGV[6] == '1', tonumber(ARGV[7])
local nextToken = ARGV[8]
if tombstoneMs > 0 then
  redis.call('SET', tombstone, '1', 'PX', tombstoneMs)
end
local function reply(left, handed, yielded)
  if yielded then return {left, handed, 1} end
  if nextToken then return {left, handed} end
  return left
end
if not ends then
  if leave_line(queue, queueEnds, token) then
    local now = now_ms()
    local held = false
    for i = 2, #others, 2 do
      if others[i] > now then held = true end
    end
    if not held then
      grant_next(lock, counter, queue, queueEnds, channel, counterTTL, false)
    end
  end
  return reply(-1, 0)
end
-- A lone hold needs no clock read. The lock key expires when the latest of
-- its holds ends (every script that sets a hold's end sets the key's expiry
-- to the latest), so while the key exists a lone hold's lease runs.
local now = nil
local live, latest, drop = 0, 0, {hold}
if #others > 0 then
  now = now_ms()
  for i = 1, #others, 2 do
    if others[i + 1] > now then
      live = live + 1
      if others[i + 1] > latest then latest = others[i + 1] end
    else
      drop[#drop + 1] = others[i]
    end
  end
end
local left = live
if now and ends <= now then
  left = -1
end
if live == 0 then
  -- Processes waiting in turn go after the line of fair waiters, if any.
  if turns and others_in_line(turns, process) and redis.call('EXISTS', queue) == 0 then
    if nextToken and left == 0 and streak < ` + strconv.Itoa(turnHoldsMax) + ` and redis.call('EXISTS', KEYS[6]) == 0 then
      -- The releasing process's turn goes on: its next waiter gets the
      -- lock (take writes the holder's fields anew), and the line stays.
      redis.call('HDEL', lock, 'id', unpack(drop))
      local taken = take(lock, counter, nextToken, 't:' .. nextToken, now_us(), tonumber(ARGV[9]), tonumber(ARGV[10]), counterTTL, ARGV[11], true)
      redis.call('HSET', lock, 'streak', string.format('%d', streak + 1))
      return reply(0, taken[2])
    end
    local yielded = name_next(lock, channel, turns, process, processWaits, graceMs, drop)
    if yielded ~= nil then
      return reply(left, 0, yielded)
    end
  end
  redis.call('DEL', lock)
  if waited or turns then
    grant_next(lock, counter, queue, queueEnds, channel, counterTTL, true)
  elseif nextToken and left == 0 and redis.call('EXISTS', KEYS[6]) == 0 then
    local taken = take(lock, counter, nextToken, 't:' .. nextToken, now_us(), tonumber(ARGV[9]), tonumber(ARGV[10]), counterTTL, ARGV[11])
    return reply(0, taken[2])
  end
else
  redis.call('HDEL', lock, unpack(drop))
  redis.call('PEXPIRE', lock, latest - now)
end
return reply(left, 0)
`)

// renewFunctions are the renewal scripts' helpers (with holdsOf).
const renewFunctions = `
-- renew_hold sets the lease of hold in lock, if it is still running at now
-- (ms), to ttl from now, and makes the lock key live as long as its longest
-- hold; it never re-creates a lapsed hold. It returns 1 when renewed, 0 when
-- the lock does not have the hold. now is read by the caller, once (nil:
-- read it here, only when the hold is found).
local function renew_hold(lock, hold, ttl, now)
  local ends, others = holds_of(lock, hold)
  if not ends then
    return 0
  end
  now = now or now_ms()
  if ends <= now then
    return 0
  end
  local latest, drop = now + ttl, {}
  for i = 1, #others, 2 do
    if others[i + 1] > now then
      if others[i + 1] > latest then latest = others[i + 1] end
    else
      drop[#drop + 1] = others[i]
    end
  end
  if #drop > 0 then
    redis.call('HDEL', lock, unpack(drop))
  end
  redis.call('HSET', lock, hold, string.format('%d', now + ttl))
  redis.call('PEXPIRE', lock, latest - now)
  return 1
end

-- extend_hold is renew_hold reading one field of the hash instead of all
-- of them, when the renewal extends the hold's lease (every renewal of the
-- lease keeper does: each is ttl from a later instant). The lock key
-- expires with its latest hold (every script keeps it so), so after the
-- extension it must live as long as the later of its expiry and the hold's
-- new end: PTTL tells whether the expiry moves. A renewal that would end
-- the hold sooner than it ends now (a Refresh with a shorter ttl) takes
-- renew_hold's path, which reads every hold to set the key's expiry to
-- the latest of them. Lapsed holds of others stay until a script that
-- reads them all drops them. Redis spends about 30% less on a renewal so
-- (4.6 µs a lock in a batch of 64, against 6.5; another key's request
-- waits behind the batch).
local function extend_hold(lock, hold, ttl, now)
  local ends = redis.call('HGET', lock, hold)
  if not ends then
    return 0
  end
  ends = tonumber(ends)
  if ends <= now then
    return 0
  end
  if ends > now + ttl then
    return renew_hold(lock, hold, ttl, now)
  end
  redis.call('HSET', lock, hold, string.format('%d', now + ttl))
  if redis.call('PTTL', lock) < ttl then
    redis.call('PEXPIRE', lock, ttl)
  end
  return 1
end
`

// renewScript renews one hold (extend_hold): TIME, HGET, HSET, PTTL and,
// when the key's expiry moves, PEXPIRE.
//
//	KEYS: lock    ARGV: token, ttl (ms)
//	returns 1 when renewed, 0 when the lock does not have this hold.
var renewScript = newScript(holdsOf + renewFunctions + `
return extend_hold(KEYS[1], 't:' .. ARGV[1], tonumber(ARGV[2]), now_ms())
`)

// renewManyScript renews a batch of holds of different locks in one script
// run, on a single node (not Cluster, whose keys of one script must share a
// slot): one TIME for the batch, and no script call per lock, which would
// cost Redis about as much as the lock's own commands, and the client the
// encoding and decoding of a command per lock (see the held-locks figures
// in docs/performance.md). A lock whose key holds another type (an operator's
// write) fails alone: its entry is the error message. Any other error
// fails the batch, so that the client sees it (READONLY after a failover).
//
//	KEYS: the locks    ARGV: token, ttl (ms) for each lock, in order
//	returns for each lock 1 (renewed), 0 (the lock does not have the hold)
//	or an error message.
var renewManyScript = newScript(holdsOf + renewFunctions + `
local now = now_ms()
local out = {}
for i = 1, #KEYS do
  local ok, res = pcall(extend_hold, KEYS[i], 't:' .. ARGV[2 * i - 1], tonumber(ARGV[2 * i]), now)
  if ok then
    out[i] = res
  else
    local msg = type(res) == 'table' and res.err or tostring(res)
    if string.sub(msg, 1, 9) ~= 'WRONGTYPE' then
      error(res)
    end
    out[i] = msg
  end
end
return out
`)

// ttlScript returns the remaining lease of a hold in ms, or -2 when the
// lock does not have this hold or its lease has ended.
//
//	KEYS: lock    ARGV: token
var ttlScript = newScript(prelude + `
local ends = redis.call('HGET', KEYS[1], 't:' .. ARGV[1])
if not ends then
  return -2
end
local left = tonumber(ends) - math.floor(now_us() / 1000)
if left <= 0 then
  return -2
end
return left
`)

// script is a Lua script run with EVALSHA, falling back to EVAL when the
// server's script cache has lost it (restart, failover, SCRIPT FLUSH). A
// NOSCRIPT reply means the script did not run, so the fallback is safe.
type script struct {
	src string
	id  int // index into scriptCache
	// The source and its SHA1 (hex) as command arguments, boxed once:
	// boxing a string costs an allocation on every call otherwise.
	srcArg, shaArg any
}

var scriptCount int

func newScript(src string) script {
	scriptCount++
	if scriptCount > maxScripts {
		panic("redisbackend: more scripts than maxScripts")
	}
	sum := sha1.Sum([]byte(src))
	return script{src: src, id: scriptCount - 1, srcArg: src, shaArg: hex.EncodeToString(sum[:])}
}

// cmd makes the command that runs s with EVALSHA (sha) or EVAL.
func (s script) cmd(ctx context.Context, sha bool, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	if sha {
		cmdArgs = append(cmdArgs, "evalsha", s.shaArg)
	} else {
		cmdArgs = append(cmdArgs, "eval", s.srcArg)
	}
	cmdArgs = append(cmdArgs, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	cmd.SetFirstKeyPos(3) // for Cluster routing
	return cmd
}

// noRetry keeps go-redis from sending a lock script again after a network
// error (it retries by default, on a new connection). A copy sent after the
// caller gave up could take or extend a lock that nobody holds any more;
// the Client retries on its own terms instead. go-redis still follows
// MOVED, ASK and READONLY replies, which mean the script did not run.
//
// It also reports to its call's sendTracker when go-redis writes it.
type noRetry struct {
	*redis.Cmd
	sent *sendTracker // nil: not tracked
}

// NoRetry implements redis.Cmder.
func (noRetry) NoRetry() bool { return true }

// Args implements redis.Cmder. go-redis reads a command's arguments to write
// it to a connection, so a command whose Args was never read was never sent.
// Once its call has been abandoned unsent, it stays unsent: go-redis, still
// working on it in the background, gets a harmless ECHO to write instead.
func (c noRetry) Args() []any {
	if c.sent != nil && !c.sent.markWritten() {
		return []any{"echo", "fencelock: abandoned before it was sent"}
	}
	return c.Cmd.Args()
}

// sendTracker tells whether a call's commands may have been sent. guard
// uses it when the caller's context ends first: a call abandoned before any
// of its commands was written was certainly not sent (fencelock.ErrNotSent),
// so the Client need not clean up after it.
type sendTracker struct {
	state atomic.Int32 // trackerIdle, trackerWritten or trackerAbandoned
}

const (
	trackerIdle int32 = iota
	trackerWritten
	trackerAbandoned
)

// markWritten records a write; it reports false when the call was already
// abandoned unsent (then nothing may be written).
func (t *sendTracker) markWritten() bool {
	return t.state.CompareAndSwap(trackerIdle, trackerWritten) || t.state.Load() == trackerWritten
}

// abandon records that the caller gave up; it reports whether nothing had
// been written, in which case nothing ever will be.
func (t *sendTracker) abandon() (unsent bool) {
	return t.state.CompareAndSwap(trackerIdle, trackerAbandoned)
}

type trackerKey struct{}

// withTracker returns ctx carrying a new sendTracker for one call.
func withTracker(ctx context.Context) (context.Context, *sendTracker) {
	t := &sendTracker{}
	return context.WithValue(ctx, trackerKey{}, t), t
}

// trackerFrom returns the sendTracker of the call that ctx belongs to, or nil.
func trackerFrom(ctx context.Context) *sendTracker {
	t, _ := ctx.Value(trackerKey{}).(*sendTracker)
	return t
}

// processor is a redis.UniversalClient or a redis.Pipeliner.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// send queues or runs cmd on p, without retries, tracked for the call of
// callCtx, and returns it.
func send(ctx context.Context, p processor, cmd *redis.Cmd, callCtx context.Context) *redis.Cmd {
	_ = p.Process(ctx, noRetry{Cmd: cmd, sent: trackerFrom(callCtx)}) // the error is in cmd
	return cmd
}

// scriptCache remembers, per Backend, which scripts it has sent with EVAL, so
// that the first run of each is one round trip (EVAL loads it) rather than a
// NOSCRIPT reply followed by EVAL.
type scriptCache struct {
	sent [maxScripts]atomic.Bool
}

// maxScripts bounds the scripts of the package (newScript panics beyond
// it): room for every primitive's scripts.
const maxScripts = 32

// run runs s in one round trip (two after the server's cache was lost).
func (c *scriptCache) run(ctx context.Context, rdb redis.UniversalClient, s script, keys []string, args ...any) *redis.Cmd {
	if !c.sent[s.id].Load() {
		cmd := send(ctx, rdb, s.cmd(ctx, false, keys, args), ctx)
		if cmd.Err() == nil {
			c.sent[s.id].Store(true)
		}
		return cmd
	}
	cmd := send(ctx, rdb, s.cmd(ctx, true, keys, args), ctx)
	if isNoScript(cmd.Err()) {
		cmd = send(ctx, rdb, s.cmd(ctx, false, keys, args), ctx)
	}
	return cmd
}

// queue adds s to pipe for the call of callCtx: EVALSHA, or EVAL while this
// Backend has not sent the script yet. The caller retries NOSCRIPT replies
// with EVAL.
func (c *scriptCache) queue(ctx context.Context, pipe redis.Pipeliner, s script, callCtx context.Context, keys []string, args ...any) *redis.Cmd {
	sha := c.sent[s.id].Load()
	c.sent[s.id].Store(true) // optimistic: a failed EVAL leaves NOSCRIPT to the fallback
	return send(ctx, pipe, s.cmd(ctx, sha, keys, args), callCtx)
}

// call is one script invocation in a pipelined batch.
type call struct {
	keys []string
	args []any
}

// runBatch runs the script once per call in one pipelined round trip (per
// Cluster node), then once more with EVAL for the calls that met NOSCRIPT.
// It returns one command per call, each with its own result or error.
func (c *scriptCache) runBatch(ctx context.Context, rdb redis.UniversalClient, s script, calls []call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i, call := range calls {
		cmds[i] = c.queue(ctx, pipe, s, ctx, call.keys, call.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are in the commands

	var missing []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return cmds
	}
	pipe = rdb.Pipeline()
	for _, i := range missing {
		cmds[i] = send(ctx, pipe, s.cmd(ctx, false, calls[i].keys, calls[i].args), ctx)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// isNoScript reports whether err is Redis's NOSCRIPT reply. (It checks
// for nil first: HasErrorPrefix allocates even for nil, on every call.)
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
