package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The Backend is a driver.Store of every kind of hold, with every
// capability: each request goes to its kind's scripts.
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
	return fmt.Errorf("%w: redisbackend keeps no %v holds", driver.ErrUnsupported, k)
}

// Acquire implements driver.Store with the acquire script of req.Kind.
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

// Release implements driver.Store with the release script of req.Kind.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	switch req.Kind {
	case driver.KindLock:
		return b.releaseLock(ctx, req)
	case driver.KindSemaphore, driver.KindRead, driver.KindWrite:
		return b.releaseHold(ctx, holdKind(req.Kind), req)
	}
	return driver.ReleaseResult{}, unsupportedKind(req.Kind)
}

// Renew implements driver.Store: one pipelined round trip for the batch
// (one per node on Cluster), whatever kinds it mixes.
func (b *Backend) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	if b.optErr != nil {
		return nil, b.optErr
	}
	locksOnly := true
	for _, r := range reqs {
		if !b.Supports(r.Kind) {
			return nil, unsupportedKind(r.Kind)
		}
		if err := checkLease("ttl", r.TTL); err != nil {
			return nil, err
		}
		if r.Kind != driver.KindLock {
			if err := checkNames(r.Namespace, r.Key); err != nil {
				return nil, err
			}
			locksOnly = false
		}
	}
	if locksOnly {
		return b.renewLocks(ctx, reqs)
	}
	return b.renewBatch(ctx, reqs)
}

// TTL implements driver.Store with the TTL script of ref.Kind.
func (b *Backend) TTL(ctx context.Context, ref driver.Ref) (time.Duration, error) {
	switch ref.Kind {
	case driver.KindLock:
		if b.optErr != nil {
			return 0, b.optErr
		}
		return b.lockTTL(ctx, ref)
	case driver.KindSemaphore, driver.KindRead, driver.KindWrite:
		return b.holdTTL(ctx, holdKind(ref.Kind), ref)
	}
	return 0, unsupportedKind(ref.Kind)
}

// Watch implements driver.Notifier on the Backend's one pub/sub
// connection. A waiter in a line (req.Token) is woken when the lock is
// freed while it is first in line, or when it becomes first in line of a
// free lock; not by releases that are other waiters' turns. A watch of
// Changes is also woken by the "acquired" message of an acquisition with
// Request.Notify. A semaphore's or read-write lock's watch is woken by its
// holds' releases.
func (b *Backend) Watch(ctx context.Context, req driver.WatchRequest) (*driver.Watch, error) {
	if !b.Supports(req.Kind) {
		return nil, unsupportedKind(req.Kind)
	}
	if b.notifier == nil {
		return nil, errNotificationsOff
	}
	switch {
	case req.Kind != driver.KindLock:
		return b.notifier.watch(ctx, holdKeysFor(req.Namespace, req.Key, holdKind(req.Kind)).channel, false)
	case req.Token != "":
		return b.notifier.watchFor(ctx, req.Namespace, keysFor(req.Namespace, req.Key).channel, req.Token)
	}
	return b.notifier.watch(ctx, keysFor(req.Namespace, req.Key).channel, req.Changes)
}
