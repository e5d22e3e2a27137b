package redisbackend

import (
	"context"
	"time"

	"github.com/fencelock/fencelock"
)

// Read-write locks (fencelock.Client.RWLock): the holds layout of holds.go,
// kind "rw". Readers and the writer are members of one sorted set, scored
// by the end of their leases; the info hash names the writer. Three more
// sorted sets keep places, scored by when each lapses: the intents of
// waiting writers, the places of waiting readers, and the readers the last
// writer's release let in ahead of the next writer.

var _ fencelock.RWLockBackend = (*Backend)(nil)

// rwAcquireScript takes a read or write hold. A writer gets it when no
// lease is live and no admitted reader is live; a reader when it is
// admitted, or when no writer holds it and no writer's intent is live
// (writer preference). A refused caller registers or renews its place: a
// writer's intent, a reader's place among those the writer's release
// admits. A token that holds a live hold restarts its lease (a retry).
//
//	KEYS: holds, info, fence counter, tombstone, writers, readers, admitted
//	ARGV: token, ttl (ms), counter expiry (ms, 0: none), fence floor, write (1 or 0), place (ms, 0: none)
//	returns {1, fence, 1} when taken; when not, {0, 0, 0, ms until the
//	lock may let the caller in, or -1}.
var rwAcquireScript = newScript(prelude + holdFunctions + `
local holds, info, counter, tombstone = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local writers, readers, admitted = KEYS[5], KEYS[6], KEYS[7]
local token, ttl, counterTTL, floor = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local write, place = ARGV[5] == '1', tonumber(ARGV[6])
local sets = {holds, writers, readers, admitted}

local nowUs = now_us()
local now = math.floor(nowUs / 1000)
prune_holds(holds, info, now)
prune_places(writers, readers, admitted, now)

if redis.call('EXISTS', tombstone) == 1 then
  -- A late copy of an acquire that its client gave up and released.
  redis.call('ZREM', writers, token)
  redis.call('ZREM', readers, token)
  redis.call('ZREM', admitted, token)
  keep_alive(info, sets, now)
  local last = last_score(holds)
  if last > now then return {0, 0, 0, last - now} end
  return {0, 0, 0, -1}
end

local again = retry_hold(holds, info, sets, token, now, ttl)
if again then return again end

if write then
  if redis.call('ZCARD', holds) == 0 and redis.call('ZCARD', admitted) == 0 then
    redis.call('ZREM', writers, token)
    redis.call('HSET', info, 'writer', token)
    return grant(holds, info, sets, counter, token, nowUs, ttl, floor, counterTTL)
  end
  if place > 0 then
    redis.call('ZADD', writers, now + place, token)
  end
  -- Every live hold, and every admitted reader, must be gone first.
  return refuse(info, sets, now, math.max(last_score(holds), last_score(admitted)) - now)
end

local writer = redis.call('HGET', info, 'writer')
local firstIntent = first_score(writers)
if not writer and (redis.call('ZREM', admitted, token) == 1 or not firstIntent) then
  redis.call('ZREM', readers, token)
  return grant(holds, info, sets, counter, token, nowUs, ttl, floor, counterTTL)
end
if place > 0 then
  redis.call('ZADD', readers, now + place, token)
end
-- The writer's lease, or the earliest intent (it may lapse), bounds the wait.
local wait = -1
if writer then
  wait = tonumber(redis.call('ZSCORE', holds, writer)) - now
end
if firstIntent and (wait < 0 or firstIntent - now < wait) then
  wait = firstIntent - now
end
return refuse(info, sets, now, wait)
`)

// AcquireRW implements fencelock.RWLockBackend.
func (b *Backend) AcquireRW(ctx context.Context, req fencelock.RWRequest) (fencelock.AcquireResult, error) {
	if err := b.checkAcquire(req.Request); err != nil {
		return fencelock.AcquireResult{}, err
	}
	if req.Place != 0 {
		if err := checkLease("place", req.Place); err != nil {
			return fencelock.AcquireResult{}, err
		}
	}
	k := holdKeysFor(req.Namespace, req.Key, rwKind)
	keys := []string{k.holds, k.info, k.fence, k.tombstone(req.Token), k.writers, k.readers, k.admitted}
	args := []any{req.Token, ms(req.TTL), ms(b.counterExpiry), max(req.FenceFloor, 0), rwFlag(req.Write), ms(req.Place)}
	return b.acquireHold(ctx, rwAcquireScript, keys, k, true, req.Token, args)
}

// ReleaseRW implements fencelock.RWLockBackend.
func (b *Backend) ReleaseRW(ctx context.Context, req fencelock.ReleaseRequest) (fencelock.ReleaseResult, error) {
	return b.releaseHold(ctx, rwKind, req)
}

// RenewRW implements fencelock.RWLockBackend: one pipelined round trip for
// the batch (one per node on Cluster).
func (b *Backend) RenewRW(ctx context.Context, reqs []fencelock.RenewRequest) ([]fencelock.RenewResult, error) {
	return b.renewHolds(ctx, rwKind, reqs)
}

// RWTTL implements fencelock.RWLockBackend.
func (b *Backend) RWTTL(ctx context.Context, ref fencelock.LockRef) (time.Duration, error) {
	return b.holdTTL(ctx, rwKind, ref)
}

// WatchRW implements fencelock.RWLockBackend on the Backend's one pub/sub
// connection.
func (b *Backend) WatchRW(ctx context.Context, namespace, key string) (*fencelock.Watch, error) {
	return b.watchHolds(ctx, rwKind, namespace, key)
}
