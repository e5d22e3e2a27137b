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

// semAcquireScript takes a permit when fewer than the caller's number are
// live: lua/sem_acquire.lua.
var semAcquireScript = newScript(luaScript("sem_acquire.lua"))

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
