package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
)

// The line of fair waiters (fencelock.WithFairness) lives on the server, so
// that it is one line across every process: a sorted set of waiter tokens
// by arrival, and a hash of the moment (server ms) each place lapses unless
// its waiter renews it (keys.go). A waiter that crashed or was paused keeps
// the line waiting for the rest of its place's lease at most.

// queueFunctions are the Lua helpers of the line, shared by the fair acquire
// script and the release script.
const queueFunctions = `
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
`

// grantFunctions hand the free lock to the first waiter of the line
// (fencelock.FairGranter); they need prelude and queueFunctions.
const grantFunctions = `
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
      local reply = take(lock, counter, g.o, 't:' .. head, nowUs, tonumber(g.l), tonumber(g.f), counterTTL, g.i, others)
      redis.call('PUBLISH', g.c or channel, 'grant:' .. head .. ':' .. string.format('%d', reply[2]) .. ':' .. g.s)
      return
    end
    -- The head's place lapsed: drop it and look at the next.
    redis.call('ZREM', queue, head)
    redis.call('HDEL', queueEnds, head, 'g:' .. head)
  end
end
`

// fairAcquireScript is acquireScript for a waiter in the line: the free lock
// goes to the first live waiter of the line (or to anyone when the line is
// empty). A refused waiter joins the line, or renews its place, for place
// ms (0: it does not join, as for TryAcquire). Re-entry by the owner does
// not wait in line, and leaves it.
//
//	KEYS: lock, fence counter, tombstone, queue, queue ends
//	ARGV: owner, token, ttl (ms), counter expiry (ms, 0: none), fence floor, place (ms), channel,
//	      grant (ms, 0: no grants), attempt number, the waiter's own channel ("": none)[, identity]
//	returns {1, fence, holds} when held; when not, {0, 0, 0, ms until the
//	holder's lease or the first waiter's place ends, or -1}.
//
// Uncontended (no lock, no tombstone, no line: one EXISTS of the three), it
// runs the commands acquireScript runs, and defines the helpers of the line
// only after that path has returned.
//
// A waiter that accepts grants (fencelock.FairGranter) leaves with its place
// what a release needs to take the lock for it and the channel to tell it
// on (field g:TOKEN, see grantFunctions); it is rewritten by each attempt,
// so it names the latest attempt the server handled.
var fairAcquireScript = newScript(takeFunctions + `
local lock, counter, tombstone, queue, queueEnds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, token, ttl, counterTTL, floor = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local place, channel = tonumber(ARGV[6]), ARGV[7]
local hold = 't:' .. token

local nowUs = now_us()

-- The uncontended case in one read, as in acquireScript: no lock key, no
-- tombstone, no line. The tombstone is named twice, so that the count
-- tells it apart from the line below.
local present = redis.call('EXISTS', lock, queue, tombstone, tombstone)
if present == 0 then
  return take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, ARGV[11])
end
` + holderFunctions + queueFunctions + `
local now = math.floor(nowUs / 1000)
local holder, live, latest, waited, found = current_holder(lock, now)

-- Besides the lock key (found by HGETALL), EXISTS counted the line once
-- and the tombstone twice: 2 or more is a tombstone.
if present - (found and 1 or 0) >= 2 then
  -- A late copy of an acquire that its client gave up and released.
  leave_line(queue, queueEnds, token)
  if holder then return {0, 0, 0, latest - now} end
  return {0, 0, 0, -1}
end

if holder and holder == owner then
  -- No place left in line to hold the lock back, or be granted it, later.
  leave_line(queue, queueEnds, token)
  return reenter(lock, hold, now, ttl, live, latest)
end

-- The line matters only to a free lock: while it is held, the release
-- that frees it (grant_next) drops the lapsed places at the head.
local head, headEnds = nil, 0
if not holder then
  head, headEnds = queue_head(queue, queueEnds, now)
  if not head or head == token then
    local reply = take(lock, counter, owner, hold, nowUs, ttl, floor, counterTTL, ARGV[11])
    if head then
      leave_line(queue, queueEnds, token)
      if redis.call('EXISTS', queue) == 1 then
        -- Others wait in line: this hold's release must wake the next.
        redis.call('HSET', lock, 'waited', '1')
      else
        redis.call('DEL', queueEnds)
      end
    end
    return reply
  end
end

if place > 0 then
  -- Joins at the end of the line, or keeps its place (NX): a busy line's
  -- waiters join far more often than they renew.
  redis.call('ZADD', queue, 'NX', redis.call('HINCRBY', queueEnds, '#seq', 1), token)
  local grant = tonumber(ARGV[8])
  if grant > 0 then
    local g = {o = owner, l = ARGV[8], f = ARGV[5], s = ARGV[9]}
    if ARGV[10] ~= '' then g.c = ARGV[10] end
    if ARGV[11] then g.i = ARGV[11] end
    redis.call('HSET', queueEnds, token, string.format('%d', now + place), 'g:' .. token, cjson.encode(g))
  else
    redis.call('HSET', queueEnds, token, string.format('%d', now + place))
  end
  -- The line's keys outlive every place in it: each place ends at most
  -- place ms from now. They are refreshed to twice that, so that in a busy
  -- line one join in many refreshes them, not every one; never
  -- shortened, whatever place other waiters use.
  if redis.call('PTTL', queue) < place then
    redis.call('PEXPIRE', queue, 2 * place)
    redis.call('PEXPIRE', queueEnds, 2 * place)
  end
end

if holder then
  -- Someone waits: the release that frees the lock must wake the line.
  if not waited then
    redis.call('HSET', lock, 'waited', '1')
  end
  return {0, 0, 0, latest - now}
end
-- Free, and another waiter's turn: remind it, in case the message that
-- told it was lost (it also comes back on its own before its place lapses).
redis.call('PUBLISH', channel, 'next:' .. head)
return {0, 0, 0, headEnds - now}
`)

var _ fencelock.FairBackend = (*Backend)(nil)

// AcquireFair implements fencelock.FairBackend: Acquire for a waiter in the
// lock's line of fair waiters, kept on the server.
func (b *Backend) AcquireFair(ctx context.Context, req fencelock.AcquireRequest, place time.Duration) (fencelock.AcquireResult, error) {
	return b.acquireFair(ctx, req, place, 0, 0)
}

var _ fencelock.FairGranter = (*Backend)(nil)

// AcquireFairGrant implements fencelock.FairGranter: AcquireFair for a
// waiter whose turn may come as a grant, the release script taking the lock
// for it. With replica acknowledgement (WithReplicaAck) there are no grants:
// a release is not acknowledged on the waiter's behalf, so its turn wakes it
// to acquire as AcquireFair does.
func (b *Backend) AcquireFairGrant(ctx context.Context, req fencelock.AcquireRequest, place, grant time.Duration, seq int64) (fencelock.AcquireResult, error) {
	if b.ack != nil || place <= 0 {
		grant = 0
	}
	if grant != 0 {
		if err := checkLease("grant", grant); err != nil {
			return fencelock.AcquireResult{}, err
		}
		if grant > req.TTL {
			return fencelock.AcquireResult{}, fmt.Errorf("%w: grant %v longer than the ttl %v", fencelock.ErrInvalidArgument, grant, req.TTL)
		}
		if seq <= 0 {
			return fencelock.AcquireResult{}, fmt.Errorf("%w: attempt number %d, not positive", fencelock.ErrInvalidArgument, seq)
		}
	}
	return b.acquireFair(ctx, req, place, grant, seq)
}

func (b *Backend) acquireFair(ctx context.Context, req fencelock.AcquireRequest, place, grant time.Duration, seq int64) (fencelock.AcquireResult, error) {
	if b.optErr != nil {
		return fencelock.AcquireResult{}, b.optErr
	}
	if err := checkNames(req.Namespace, req.Key); err != nil {
		return fencelock.AcquireResult{}, err
	}
	if err := checkLease("ttl", req.TTL); err != nil {
		return fencelock.AcquireResult{}, err
	}
	if place != 0 {
		if err := checkLease("place", place); err != nil {
			return fencelock.AcquireResult{}, err
		}
	}
	k := keysFor(req.Namespace, req.Key)
	keys := []string{k.lock, k.fence, k.tombstone(req.Token), k.queue(), k.queueEnds()}
	grantChannel := ""
	if grant > 0 && b.notifier != nil {
		grantChannel = b.notifier.grantChannel(req.Namespace)
	}
	args := []any{req.Owner, req.Token, ms(req.TTL), ms(b.counterExpiry), max(req.FenceFloor, 0), ms(max(place, 0)), k.channel,
		ms(max(grant, 0)), seq, grantChannel}
	if req.Identity != "" {
		args = append(args, req.Identity)
	}
	res, err := guard(b, ctx, func(ctx context.Context) (fencelock.AcquireResult, error) {
		var vals []int64
		var err error
		if b.ack != nil {
			vals, err = b.acquireAcked(ctx, fairAcquireScript, keys, k, req, args)
		} else {
			vals, err = b.pipe.run(ctx, fairAcquireScript, keys, args...).Int64Slice()
		}
		if err != nil {
			return fencelock.AcquireResult{}, classify(err)
		}
		return acquireResult(vals)
	})
	if err == nil {
		b.notifyAcquired(ctx, req, res, k)
	}
	return res, err
}

// WatchTurn implements fencelock.FairBackend: the waiter with token is woken
// when the lock is freed while it is first in line, or when it becomes first
// in line of a free lock; not by releases that are other waiters' turns.
func (b *Backend) WatchTurn(ctx context.Context, namespace, key, token string) (*fencelock.Watch, error) {
	if b.notifier == nil {
		return nil, errNotificationsOff
	}
	return b.notifier.watchFor(ctx, namespace, keysFor(namespace, key).channel, token)
}

// acquireResult decodes the reply of an acquire script.
func acquireResult(vals []int64) (fencelock.AcquireResult, error) {
	var res fencelock.AcquireResult
	if len(vals) < 3 {
		return res, fmt.Errorf("redisbackend: acquire script returned %v", vals)
	}
	res.Acquired, res.Fence, res.Holds = vals[0] == 1, vals[1], int(vals[2])
	if !res.Acquired && len(vals) > 3 && vals[3] >= 0 {
		// 0 means the lease ends within the millisecond: retry then,
		// not after a whole backoff.
		res.HolderTTL = max(time.Duration(vals[3])*time.Millisecond, time.Millisecond)
	}
	return res, nil
}
