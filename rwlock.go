package fencelock

import (
	"context"
	"fmt"
	"time"
)

// RWLock is a read-write lock shared by every Client of the same backend
// and namespace: any number of readers at once, or one writer. Make one
// with Client.RWLock; it keeps no state and is safe for concurrent use.
//
// Each read or write hold is a *Lock with a fence of its own (readers and
// writers of the lock draw from one counter, so every fence is greater than
// those of all earlier holds), a lease of its own, renewed by the Client's
// lease keeper independently of the other holds (WithAutoRenew, Refresh),
// and the loss signals of a Lock (Done, Err, Context: ErrLost).
//
// Writers are preferred, and readers get their turn: a writer that waits
// registers its intent on the server, and from then on new readers wait
// (readers that hold the lock keep it until they release it or their
// leases end; a writer never gets the lock while any reader's lease is
// live). When the writer releases, the readers that waited meanwhile are
// let in before the next writer, as with sync.RWMutex; so neither side
// starves the other. As with sync.RWMutex, a holder of a read hold must not
// take another read hold of the same lock while a writer may be waiting: it
// would wait for a writer that waits for it (until a lease ends). Holds are
// not re-entrant; WithOwner is ignored.
//
// A read-write lock is apart from the plain lock and the semaphore of the
// same name: they never block each other.
type RWLock struct {
	c    *Client
	name string
}

// RWLock returns the read-write lock called name. It does not contact the
// store. An empty name or a store that does not keep read-write locks
// (driver.Store.Supports) make every acquire fail, with an error matching
// ErrInvalidArgument or ErrUnsupported.
func (c *Client) RWLock(name string) *RWLock {
	return &RWLock{c: c, name: name}
}

// TryAcquireRead makes one attempt to take a read hold with a lease of ttl.
// It returns an error matching ErrNotAcquired when a writer holds the lock
// or waits for it, and otherwise behaves as Client.TryAcquire.
func (rw *RWLock) TryAcquireRead(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	return rw.acquire(ctx, ttl, opts, KindRead, true)
}

// AcquireRead takes a read hold with a lease of ttl, waiting while a writer
// holds the lock or waits for it. It keeps a place on the server while it
// waits (see driver.PlaceLease), which lets it in when the writer releases,
// before the next writer; it withdraws the place when it gives up. The
// options and errors are those of Client.Acquire.
func (rw *RWLock) AcquireRead(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	return rw.acquire(ctx, ttl, opts, KindRead, false)
}

// TryAcquireWrite makes one attempt to take the write hold with a lease of
// ttl. It returns an error matching ErrNotAcquired when any hold is live
// (or readers admitted after the last writer have yet to come), and
// registers no intent.
func (rw *RWLock) TryAcquireWrite(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	return rw.acquire(ctx, ttl, opts, KindWrite, true)
}

// AcquireWrite takes the write hold with a lease of ttl, waiting until no
// reader's or writer's lease is live. While it waits, its intent keeps new
// readers out (see driver.PlaceLease); it withdraws the intent when it gives up.
// The options and errors are those of Client.Acquire.
func (rw *RWLock) AcquireWrite(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	return rw.acquire(ctx, ttl, opts, KindWrite, false)
}

// acquire is the body of the four acquire methods; kind says whether it
// takes a read or the write hold.
func (rw *RWLock) acquire(ctx context.Context, ttl time.Duration, opts []AcquireOption, kind Kind, single bool) (*Lock, error) {
	if rw == nil || rw.c == nil {
		return nil, errNilClient
	}
	check := func() error {
		if !rw.c.store.Supports(kind) {
			return lockError("acquire", rw.name, fmt.Errorf(
				"%w: read-write locks need a store that keeps them (driver.Store.Supports); %T does not", ErrUnsupported, rw.c.store))
		}
		return nil
	}
	return rw.c.acquireHold(ctx, rw.name, ttl, opts, check, kind, 0, single)
}
