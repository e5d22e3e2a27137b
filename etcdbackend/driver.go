package etcdbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The Backend is a driver.Store of every kind of hold, with every
// capability: each request goes to its kind's transactions.
var (
	_ driver.Store     = (*Backend)(nil)
	_ driver.Notifier  = (*Backend)(nil)
	_ driver.Lines     = (*Backend)(nil)
	_ driver.Inspector = (*Backend)(nil)
	_ driver.Ticker    = (*Backend)(nil)
)

// Supports implements driver.Store: every kind of hold.
func (b *Backend) Supports(k driver.Kind) bool { return k <= driver.KindWrite }

// unsupportedKind is the error of a request of a kind no Backend keeps.
func unsupportedKind(k driver.Kind) error {
	return fmt.Errorf("%w: etcdbackend keeps no %v holds", driver.ErrUnsupported, k)
}

// holdKeysOf are the keys among which ref's hold lives: the lock's, the
// semaphore's or the read-write lock's of that name.
func holdKeysOf(ref driver.Ref) keys {
	switch ref.Kind {
	case driver.KindSemaphore:
		return semKeysOf(ref.Namespace, ref.Key)
	case driver.KindRead, driver.KindWrite:
		return rwKeysFor(ref.Namespace, ref.Key)
	}
	return keysOf(ref.Namespace, ref.Key)
}

// Acquire implements driver.Store with the transactions of req.Kind.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	switch req.Kind {
	case driver.KindLock:
		return b.acquireLock(ctx, req)
	case driver.KindSemaphore:
		return b.acquirePermit(ctx, req)
	case driver.KindRead, driver.KindWrite:
		return b.acquireRW(ctx, req)
	}
	return driver.Result{}, unsupportedKind(req.Kind)
}

// Release implements driver.Store with the transaction of req.Kind.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	switch req.Kind {
	case driver.KindLock:
		return b.releaseLock(ctx, req)
	case driver.KindSemaphore:
		return b.releasePermit(ctx, req)
	case driver.KindRead, driver.KindWrite:
		return b.releaseRW(ctx, req)
	}
	return driver.ReleaseResult{}, unsupportedKind(req.Kind)
}

// TTL implements driver.Store: the remaining lease of ref's hold, rounded
// down to whole seconds by etcd (at least a millisecond while the lease
// runs), in two round trips: the hold, then its lease.
func (b *Backend) TTL(ctx context.Context, ref driver.Ref) (time.Duration, error) {
	switch ref.Kind {
	case driver.KindLock:
		return b.lockTTL(ctx, ref)
	case driver.KindSemaphore:
		return b.permitTTL(ctx, ref)
	case driver.KindRead, driver.KindWrite:
		return b.rwTTL(ctx, ref)
	}
	return 0, unsupportedKind(ref.Kind)
}

// Watch implements driver.Notifier with etcd watches: on the holds of the
// lock, semaphore or read-write lock; with Changes, on the lock's new holds
// too; for a waiter in a line (Token), on its turn.
func (b *Backend) Watch(ctx context.Context, req driver.WatchRequest) (*driver.Watch, error) {
	switch req.Kind {
	case driver.KindLock:
		switch {
		case req.Token != "":
			return b.watchTurn(ctx, req.Namespace, req.Key, req.Token)
		case req.Changes:
			return b.watchChanges(ctx, req.Namespace, req.Key)
		}
		return b.watchReleases(ctx, req.Namespace, req.Key)
	case driver.KindSemaphore:
		return b.watchPermits(ctx, req.Namespace, req.Key)
	case driver.KindRead, driver.KindWrite:
		return b.watchRW(ctx, req.Namespace, req.Key)
	}
	return nil, unsupportedKind(req.Kind)
}

// AcquireInLine implements driver.Lines with the line of waiters of
// fair.go. There are no grants (t.Grant is ignored): a waiter's turn wakes
// it to acquire.
func (b *Backend) AcquireInLine(ctx context.Context, req driver.Request, t driver.Turn) (driver.Result, error) {
	if req.Kind != driver.KindLock {
		return driver.Result{}, fmt.Errorf("%w: etcdbackend keeps lines of waiters for plain locks only", driver.ErrUnsupported)
	}
	return b.acquireFair(ctx, req, t.Place)
}

// HandOff implements driver.Lines without handing anything over: it is
// Release of rel, and the waiters it frees the lock for are woken by their
// watches. (A hand-off would need the next holder's lease granted before
// the release's transaction, a round trip more on every release.)
func (b *Backend) HandOff(ctx context.Context, rel driver.ReleaseRequest, next driver.Request) (driver.ReleaseResult, driver.Result, error) {
	if rel.Kind != driver.KindLock || next.Kind != driver.KindLock {
		return driver.ReleaseResult{}, driver.Result{}, fmt.Errorf("%w: etcdbackend hands over plain locks only", driver.ErrUnsupported)
	}
	res, err := b.releaseLock(ctx, rel)
	return res, driver.Result{}, err
}
