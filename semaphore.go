package fencelock

import (
	"context"
	"fmt"
	"time"
)

// Semaphore is a counting semaphore shared by every Client of the same
// backend and namespace: at most Permits holders at a time, each holding a
// permit with a lease of its own. Make one with Client.Semaphore; it is a
// small value that keeps no state, safe for concurrent use.
//
// A permit is a *Lock: it has a Fence (strictly greater than the fence of
// every earlier permit of the semaphore), Done, Err and Context report its
// loss (ErrLost), WithAutoRenew and Refresh renew it through the Client's
// lease keeper, and Release gives it back. Permits are not re-entrant:
// WithOwner is ignored, and each acquire takes one more permit.
//
// Callers may pass different Permits for the same name: each acquire checks
// the live permits against its own number. A caller with 2 gets a permit
// only while fewer than 2 are held, whoever holds them, so the number of
// holders never exceeds the largest Permits in use. While a deployment
// changes the number, old and new callers each keep their own limit.
//
// A semaphore is apart from the plain lock and the read-write lock of the
// same name: they never block each other.
type Semaphore struct {
	c       *Client
	name    string
	permits int
	prim    *primitive // nil when the backend has no semaphores
}

// Semaphore returns the semaphore called name with permits permits. It does
// not contact the backend. An empty name, a count below 1 or a backend that
// does not implement SemaphoreBackend make every acquire fail, with an
// error matching ErrInvalidArgument or ErrUnsupported.
func (c *Client) Semaphore(name string, permits int) *Semaphore {
	s := &Semaphore{c: c, name: name, permits: permits}
	if c == nil || c.prims.sem == nil {
		return s
	}
	ops := c.prims.sem
	s.prim = &primitive{
		ops: ops,
		acquire: func(ctx context.Context, req AcquireRequest, _ bool) (AcquireResult, error) {
			return ops.b.AcquirePermit(ctx, PermitRequest{Request: req, Permits: permits})
		},
		watch: ops.b.WatchPermits,
	}
	return s
}

// Name returns the semaphore's name, without namespace.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits this Semaphore value allows.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire makes one attempt to take a permit with a lease of ttl. It
// returns an error matching ErrNotAcquired when Permits permits are held,
// and otherwise behaves as Client.TryAcquire.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if s == nil || s.c == nil {
		return nil, errNilClient
	}
	return s.c.acquireHold(ctx, s.name, ttl, opts, s.check, s.prim, KindSemaphore, true)
}

// Acquire takes a permit with a lease of ttl, waiting while Permits permits
// are held: a release wakes it at once (Redis pub/sub), and its fallback
// timer never sleeps past the end of the earliest permit's lease, so that
// the permit of a holder that died is taken when its lease ends. The
// options and errors are those of Client.Acquire.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if s == nil || s.c == nil {
		return nil, errNilClient
	}
	return s.c.acquireHold(ctx, s.name, ttl, opts, s.check, s.prim, KindSemaphore, false)
}

// check refuses a bad count, and a backend without semaphores.
func (s *Semaphore) check() error {
	if s.permits < 1 {
		return invalid("semaphore permits", s.permits, "must be at least 1")
	}
	if s.prim == nil {
		return lockError("acquire", s.name, fmt.Errorf(
			"%w: semaphores need a backend that implements fencelock.SemaphoreBackend; %T does not", ErrUnsupported, s.c.backend))
	}
	return nil
}

// semaphoreOps keep permits (holdOps). One per Client, so that renewals of
// the permits of every semaphore go in one batch.
type semaphoreOps struct{ b SemaphoreBackend }

func (o *semaphoreOps) renew(ctx context.Context, reqs []RenewRequest) ([]RenewResult, error) {
	return o.b.RenewPermits(ctx, reqs)
}

func (o *semaphoreOps) release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error) {
	return o.b.ReleasePermit(ctx, req)
}

func (o *semaphoreOps) ttl(ctx context.Context, ref LockRef) (time.Duration, error) {
	return o.b.PermitTTL(ctx, ref)
}

// acquireHold takes a hold of prim named key: the shared body of the
// acquire methods of Semaphore and RWLock. check validates what is the
// primitive's own (it runs after the arguments every acquire has); kind
// is the hold's, for Hooks.
func (c *Client) acquireHold(ctx context.Context, key string, ttl time.Duration, opts []AcquireOption,
	check func() error, prim *primitive, kind Kind, single bool) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	defer c.ops.begin()()
	cfg, err := c.resolveAcquire(key, ttl, opts)
	if err != nil {
		return nil, c.refused(ctx, key, kind, err)
	}
	if cfg.fair {
		return nil, c.refused(ctx, key, kind, invalid("option", "WithFairness", "applies to the plain lock only"))
	}
	if err := check(); err != nil {
		return nil, c.refused(ctx, key, kind, err)
	}
	if single {
		cfg.wait, cfg.waitSet = 0, true
	}
	cfg.prim, cfg.kind = prim, kind
	req, err := c.newRequest(ctx, key, ttl)
	if err != nil {
		return nil, c.refused(ctx, key, kind, err)
	}
	req.Owner = req.Token // not re-entrant, whatever WithOwner says
	return c.acquireWaiting(ctx, req, cfg)
}

// primitives are the Client's calls for the holds of primitives other than
// the plain lock, nil where the backend lacks them. Made once per Client.
type primitives struct {
	sem *semaphoreOps
	rw  *rwOps
}

func newPrimitives(b Backend) primitives {
	var p primitives
	if sb, ok := b.(SemaphoreBackend); ok {
		p.sem = &semaphoreOps{sb}
	}
	if rb, ok := b.(RWLockBackend); ok {
		p.rw = &rwOps{rb}
	}
	return p
}
