package redlock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/driver"
)

// The Backend is a driver.Store of plain locks that notifies of releases
// and records job ticks. It keeps no semaphores or read-write locks, no
// line of waiters and no hand-offs, and cannot report a lock's holds: a
// hold of a name is a majority of masters', which no single read sees.
var (
	_ driver.Store    = (*Backend)(nil)
	_ driver.Notifier = (*Backend)(nil)
	_ driver.Ticker   = (*Backend)(nil)
)

// Supports implements driver.Store: the plain lock only.
func (b *Backend) Supports(k driver.Kind) bool { return k == driver.KindLock }

// plainOnly refuses, before any I/O, a request of a kind other than the
// plain lock.
func plainOnly(k driver.Kind) error {
	if k == driver.KindLock {
		return nil
	}
	return fmt.Errorf("%w: redlock keeps no %v holds", driver.ErrUnsupported, k)
}

// Check implements driver.Store. It cannot tell: each master is checked by
// the requests that reach it.
func (b *Backend) Check(ctx context.Context, namespace string) error { return nil }
