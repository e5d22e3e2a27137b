package memorybackend

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/driver"
)

// The Backend is a driver.Store with every capability.
var (
	_ driver.Store     = (*Backend)(nil)
	_ driver.Notifier  = (*Backend)(nil)
	_ driver.Lines     = (*Backend)(nil)
	_ driver.Inspector = (*Backend)(nil)
	_ driver.Ticker    = (*Backend)(nil)
)

// Supports implements driver.Store: every kind of hold.
func (b *Backend) Supports(k driver.Kind) bool { return k <= driver.KindWrite }

// Check implements driver.Store: every namespace will do, and the store is
// always there.
func (b *Backend) Check(ctx context.Context, namespace string) error { return nil }

// unsupportedKind is the error of a request of a kind no store keeps.
func unsupportedKind(k driver.Kind) error {
	return fmt.Errorf("%w: memorybackend keeps no %v holds", driver.ErrUnsupported, k)
}

// Watch implements driver.Notifier: the turn of a waiter in line (a Token),
// the releases (and with Changes the acquisitions) of a lock, and the
// releases of a semaphore's permits or a read-write lock's holds.
func (b *Backend) Watch(ctx context.Context, req driver.WatchRequest) (*driver.Watch, error) {
	switch req.Kind {
	case driver.KindLock:
		if req.Token != "" {
			return b.watchTurn(ctx, req.Namespace, req.Key, req.Token)
		}
		return b.watch(ctx, req.Namespace, req.Key, req.Changes)
	case driver.KindSemaphore:
		return b.watchPermits(ctx, req.Namespace, req.Key)
	case driver.KindRead, driver.KindWrite:
		return b.watchRW(ctx, req.Namespace, req.Key)
	}
	return nil, unsupportedKind(req.Kind)
}

// AcquireInLine implements driver.Lines.
func (b *Backend) AcquireInLine(ctx context.Context, req driver.Request, t driver.Turn) (driver.Result, error) {
	if req.Kind != driver.KindLock {
		return driver.Result{}, unsupportedKind(req.Kind)
	}
	return b.acquireInLine(ctx, req, t.Place, t.Grant, t.Seq)
}

// HandOff implements driver.Lines (see releaseHandOff).
func (b *Backend) HandOff(ctx context.Context, rel driver.ReleaseRequest, next driver.Request) (driver.ReleaseResult, driver.Result, error) {
	if rel.Kind != driver.KindLock || next.Kind != driver.KindLock {
		return driver.ReleaseResult{}, driver.Result{}, fmt.Errorf("%w: hand-offs are of the plain lock", driver.ErrUnsupported)
	}
	return b.releaseHandOff(ctx, rel, next)
}
