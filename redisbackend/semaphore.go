package redisbackend

import (
	"context"
	"time"

	"github.com/fencelock/fencelock"
)

// Semaphores (fencelock.Client.Semaphore): the holds layout of holds.go,
// kind "sem". Each permit is a member of the sorted set, scored by the end
// of its lease, so expired permits are dropped by the next script that
// looks, and counting the live permits is a ZCARD.

var _ fencelock.SemaphoreBackend = (*Backend)(nil)

// semAcquireScript takes a permit when fewer than the caller's number of
// permits are live, minting its fence; a token that holds a live permit
// restarts its lease (a retry). A refusal marks the semaphore as waited for.
//
//	KEYS: holds, info, fence counter, tombstone
//	ARGV: token, ttl (ms), counter expiry (ms, 0: none), fence floor, permits
//	returns {1, fence, 1} when taken; when not, {0, 0, 0, ms until the
//	earliest permit's lease ends, or -1}.
var semAcquireScript = newScript(prelude + holdFunctions + `
local holds, info, counter, tombstone = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, counterTTL, floor, permits = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local sets = {holds}

local nowUs = now_us()
local now = math.floor(nowUs / 1000)
prune_holds(holds, info, now)

local first = first_score(holds)
if redis.call('EXISTS', tombstone) == 1 then
  -- A late copy of an acquire that its client gave up and released.
  if first then return {0, 0, 0, first - now} end
  return {0, 0, 0, -1}
end

local again = retry_hold(holds, info, sets, token, now, ttl)
if again then return again end

if redis.call('ZCARD', holds) < permits then
  return grant(holds, info, sets, counter, token, nowUs, ttl, floor, counterTTL)
end
return refuse(info, sets, now, first - now)
`)

// AcquirePermit implements fencelock.SemaphoreBackend.
func (b *Backend) AcquirePermit(ctx context.Context, req fencelock.PermitRequest) (fencelock.AcquireResult, error) {
	if err := b.checkAcquire(req.Request); err != nil {
		return fencelock.AcquireResult{}, err
	}
	if req.Permits < 1 {
		return fencelock.AcquireResult{}, &fencelock.InvalidArgumentError{Name: "semaphore permits", Value: req.Permits, Reason: "must be at least 1"}
	}
	k := holdKeysFor(req.Namespace, req.Key, semKind)
	keys := []string{k.holds, k.info, k.fence, k.tombstone(req.Token)}
	args := []any{req.Token, ms(req.TTL), ms(b.counterExpiry), max(req.FenceFloor, 0), req.Permits}
	return b.acquireHold(ctx, semAcquireScript, keys, k, false, req.Token, args)
}

// ReleasePermit implements fencelock.SemaphoreBackend.
func (b *Backend) ReleasePermit(ctx context.Context, req fencelock.ReleaseRequest) (fencelock.ReleaseResult, error) {
	return b.releaseHold(ctx, semKind, req)
}

// RenewPermits implements fencelock.SemaphoreBackend: one pipelined round
// trip for the batch (one per node on Cluster).
func (b *Backend) RenewPermits(ctx context.Context, reqs []fencelock.RenewRequest) ([]fencelock.RenewResult, error) {
	return b.renewHolds(ctx, semKind, reqs)
}

// PermitTTL implements fencelock.SemaphoreBackend.
func (b *Backend) PermitTTL(ctx context.Context, ref fencelock.LockRef) (time.Duration, error) {
	return b.holdTTL(ctx, semKind, ref)
}

// WatchPermits implements fencelock.SemaphoreBackend on the Backend's one
// pub/sub connection.
func (b *Backend) WatchPermits(ctx context.Context, namespace, key string) (*fencelock.Watch, error) {
	return b.watchHolds(ctx, semKind, namespace, key)
}
