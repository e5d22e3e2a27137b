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

// rwAcquireScript takes a read or write hold, or registers the caller's
// place: lua/rw_acquire.lua.
var rwAcquireScript = newScript(luaScript("rw_acquire.lua"))

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
