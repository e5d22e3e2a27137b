package fencelock

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Semaphore is a counting semaphore shared by every Client of the same
// backend and namespace: at most permits holders at a time (the number
// passed to Client.Semaphore), each holding a
// permit with a lease of its own. Make one with Client.Semaphore; it is a
// small value that keeps no state, safe for concurrent use.
//
// A permit is a *Lock: it has a Fence (strictly greater than the fence of
// every earlier permit of the semaphore), Done, Err and Context report its
// loss (ErrLost), WithAutoRenew and Refresh renew it through the Client's
// lease keeper, and Release gives it back. Permits are not re-entrant:
// WithOwner is ignored, and each acquire takes one more permit.
//
// Callers may pass different permits for the same name: each acquire checks
// the live permits against its own number. A caller with 2 gets a permit
// only while fewer than 2 are held, whoever holds them, so the number of
// holders never exceeds the largest number in use. While a deployment
// changes the number, old and new callers each keep their own limit.
//
// A semaphore is apart from the plain lock and the read-write lock of the
// same name: they never block each other.
type Semaphore struct {
	c       *Client
	name    string
	permits int
}

// Semaphore returns the semaphore called name with permits permits. It does
// not contact the store. An empty name, a count below 1 or a store that
// does not keep semaphores (driver.Store.Supports) make every acquire fail, with an
// error matching ErrInvalidArgument or ErrUnsupported.
func (c *Client) Semaphore(name string, permits int) *Semaphore {
	return &Semaphore{c: c, name: name, permits: permits}
}

// TryAcquire makes one attempt to take a permit with a lease of ttl. It
// returns an error matching ErrNotAcquired when all its permits are held,
// and otherwise behaves as Client.TryAcquire.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if s == nil || s.c == nil {
		return nil, errNilClient
	}
	return s.c.acquireHold(ctx, s.name, ttl, opts, s.check, KindSemaphore, s.permits, true)
}

// Acquire takes a permit with a lease of ttl, waiting while all its permits
// are held: a release wakes it at once (Redis pub/sub), and its fallback
// timer never sleeps past the end of the earliest permit's lease, so that
// the permit of a holder that died is taken when its lease ends. The
// options and errors are those of Client.Acquire.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if s == nil || s.c == nil {
		return nil, errNilClient
	}
	return s.c.acquireHold(ctx, s.name, ttl, opts, s.check, KindSemaphore, s.permits, false)
}

// check refuses a bad count, and a backend without semaphores.
func (s *Semaphore) check() error {
	if s.permits < 1 {
		return invalid("semaphore permits", s.permits, "must be at least 1")
	}
	if !s.c.store.Supports(KindSemaphore) {
		return lockError("acquire", s.name, fmt.Errorf(
			"%w: semaphores need a store that keeps them (driver.Store.Supports); %T does not", ErrUnsupported, s.c.store))
	}
	return nil
}

// acquireHold takes a hold of kind named key (a semaphore's permit, out of
// permits; a read or write hold): the shared body of the acquire methods of
// Semaphore and RWLock. check validates what is the primitive's own (it
// runs after the arguments every acquire has).
func (c *Client) acquireHold(ctx context.Context, key string, ttl time.Duration, opts []AcquireOption,
	check func() error, kind Kind, permits int, single bool) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	defer c.ops.begin()()
	hctx := c.acquireStart(ctx, key, kind)
	cfg, err := c.resolveAcquire(key, ttl, opts)
	if err != nil {
		return nil, c.refused(hctx, key, kind, err)
	}
	if cfg.fair {
		return nil, c.refused(hctx, key, kind, invalid("option", "WithFairness", "applies to the plain lock only"))
	}
	if err := check(); err != nil {
		return nil, c.refused(hctx, key, kind, err)
	}
	if single {
		cfg.wait, cfg.waitSet = 0, true
	}
	cfg.kind = kind
	if kind == KindRead || kind == KindWrite {
		cfg.keepAlive = driver.PlaceLease / 3 // each attempt renews the waiter's intent or place
	}
	req, err := c.newRequest(ctx, key, ttl)
	if err != nil {
		return nil, c.refused(hctx, key, kind, err)
	}
	req.Owner = req.Token // not re-entrant, whatever WithOwner says
	req.Kind, req.Permits = kind, permits
	return c.acquireWaiting(ctx, hctx, req, cfg)
}
