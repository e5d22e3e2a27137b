// Package drivertest checks that a driver.Store keeps the contract the
// fencelock Client relies on, the way testing/slogtest checks a
// slog.Handler. A store's own tests call Run with a constructor:
//
//	func TestDriver(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T) driver.Store {
//			return mystore.New(startServer(t))
//		})
//	}
//
// The core checks run once for every kind of hold the store Supports; the
// checks of a kind run when the store supports it, and the checks of a
// capability (Notifier, Lines, Inspector, Ticker) when the store implements
// it. What a store lacks gets no subtest, and nothing is skipped: the kinds
// it does not support, and the requests a capability it has does not
// serve, are checked to answer ErrUnsupported. Each check uses a namespace
// of its own, so one store (one server) can serve them all. Some checks
// wait for leases to end.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// checkTimeout bounds each check, so that a store that hangs fails it.
const checkTimeout = time.Minute

// kinds are every kind of hold, in the order the checks run them.
var kinds = []driver.Kind{driver.KindLock, driver.KindSemaphore, driver.KindRead, driver.KindWrite}

// check is one row of a table of checks. applies, when set, says which
// stores it is for.
type check struct {
	name    string
	run     func(ctx context.Context, s *suite)
	applies func(st driver.Store) bool
}

// kindCheck is one row of the core checks, run for each kind of hold the
// store supports (and for which applies, when set, is true).
type kindCheck struct {
	name    string
	run     func(ctx context.Context, s *suite)
	applies func(k driver.Kind) bool
}

// checks are the rows of every table but the core's, in the order they run
// (lock.go, semaphore.go, rwlock.go, notifier.go, lines.go, inspector.go,
// ticker.go).
var checks []check

// Run runs every check against stores made by newStore, each in a subtest
// of t: the core checks for each kind the store supports, then every check
// that applies to the kinds and capabilities it has.
func Run(t *testing.T, newStore func(t *testing.T) driver.Store) {
	probe := newStore(t)
	for _, k := range kinds {
		if !probe.Supports(k) {
			continue
		}
		for _, c := range coreChecks {
			if c.applies != nil && !c.applies(k) {
				continue
			}
			t.Run(k.String()+"/"+c.name, func(t *testing.T) {
				s := newSuite(t, newStore, k.String()+c.name)
				s.k = k
				ctx, cancel := context.WithTimeout(t.Context(), checkTimeout)
				defer cancel()
				c.run(ctx, s)
			})
		}
	}
	for _, c := range checks {
		if c.applies != nil && !c.applies(probe) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), checkTimeout)
			defer cancel()
			c.run(ctx, newSuite(t, newStore, c.name))
		})
	}
}

// supports is a check condition: the store keeps every kind in ks.
func supports(ks ...driver.Kind) func(driver.Store) bool {
	return func(st driver.Store) bool {
		for _, k := range ks {
			if !st.Supports(k) {
				return false
			}
		}
		return true
	}
}

// has is a check condition: the store has capability T.
func has[T any](st driver.Store) bool {
	_, ok := st.(T)
	return ok
}

// lacks is a check condition: the store does not have capability T.
func lacks[T any](st driver.Store) bool { return !has[T](st) }

// all is a check condition: every one of conds holds.
func all(conds ...func(driver.Store) bool) func(driver.Store) bool {
	return func(st driver.Store) bool {
		for _, c := range conds {
			if !c(st) {
				return false
			}
		}
		return true
	}
}

// suite is one check's store and namespace, and the kind of hold its
// helpers are about (KindLock unless the check says otherwise).
type suite struct {
	t  *testing.T
	st driver.Store
	ns string
	k  driver.Kind
}

func newSuite(t *testing.T, newStore func(t *testing.T) driver.Store, name string) *suite {
	return &suite{t: t, st: newStore(t), ns: fmt.Sprintf("drivertest-%s-%08x", name, rand.Uint32())}
}

// as returns s for holds of kind k.
func (s *suite) as(k driver.Kind) *suite {
	c := *s
	c.k = k
	return &c
}

// capability returns s's store as T; Run runs a check only on stores that
// have the capability it asks for.
func capability[T any](s *suite) T {
	s.t.Helper()
	c, ok := s.st.(T)
	if !ok {
		s.t.Fatalf("%T lacks the capability the check asks for", s.st)
	}
	return c
}

func (s *suite) ref(key, token string) driver.Ref {
	return driver.Ref{Kind: s.k, Namespace: s.ns, Key: key, Token: token}
}

// request is an acquire by token (its own owner), with one permit for a
// semaphore: every kind then excludes a second holder, except reads.
func (s *suite) request(key, token string, ttl time.Duration) driver.Request {
	return driver.Request{Ref: s.ref(key, token), Owner: token, TTL: ttl, Permits: 1}
}

func (s *suite) acquireReq(ctx context.Context, req driver.Request) driver.Result {
	s.t.Helper()
	res, err := s.st.Acquire(ctx, req)
	if err != nil {
		s.t.Fatalf("Acquire(%v %s, token %s): %v", req.Kind, req.Key, req.Token, err)
	}
	return res
}

// acquire makes one attempt for owner (the token when owner is "").
func (s *suite) acquire(ctx context.Context, key, token, owner string, ttl time.Duration) driver.Result {
	s.t.Helper()
	req := s.request(key, token, ttl)
	if owner != "" {
		req.Owner = owner
	}
	return s.acquireReq(ctx, req)
}

// release gives up token's hold without a tombstone.
func (s *suite) release(ctx context.Context, key, token string) driver.ReleaseResult {
	s.t.Helper()
	return s.releaseTombstone(ctx, key, token, 0)
}

// releaseTombstone gives up token's hold, asking the store to refuse
// acquires with token for tombstone (none when 0).
func (s *suite) releaseTombstone(ctx context.Context, key, token string, tombstone time.Duration) driver.ReleaseResult {
	s.t.Helper()
	res, err := s.st.Release(ctx, driver.ReleaseRequest{Ref: s.ref(key, token), Tombstone: tombstone})
	if err != nil {
		s.t.Fatalf("Release(%v %s, token %s, tombstone %v): %v", s.k, key, token, tombstone, err)
	}
	return res
}

func (s *suite) renew(ctx context.Context, key, token string, ttl time.Duration) driver.RenewResult {
	s.t.Helper()
	res, err := s.st.Renew(ctx, []driver.RenewRequest{{Ref: s.ref(key, token), TTL: ttl}})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		s.t.Fatalf("Renew(%v %s, token %s): %v %v", s.k, key, token, res, err)
	}
	return res[0]
}

// ttlOf returns the hold's remaining lease, or 0 when the store says it is
// not held.
func (s *suite) ttlOf(ctx context.Context, key, token string) time.Duration {
	s.t.Helper()
	d, err := s.st.TTL(ctx, s.ref(key, token))
	if errors.Is(err, driver.ErrNotHeld) {
		return 0
	}
	if err != nil || d <= 0 {
		s.t.Fatalf("TTL(%v %s, token %s): %v, %v", s.k, key, token, d, err)
	}
	return d
}

// notHeld fails the check unless TTL of token's hold answers ErrNotHeld.
func (s *suite) notHeld(ctx context.Context, key, token, what string) {
	s.t.Helper()
	if d, err := s.st.TTL(ctx, s.ref(key, token)); !errors.Is(err, driver.ErrNotHeld) {
		s.t.Fatalf("TTL of %s: %v %v, want ErrNotHeld", what, d, err)
	}
}

// waitLapsed waits, polling TTL, until token's hold has no lease left,
// failing the check if that takes more than limit.
func (s *suite) waitLapsed(ctx context.Context, key, token string, limit time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		d := s.ttlOf(ctx, key, token)
		if d == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the %v hold of token %s still had a lease of %v after %v", s.k, token, d, limit)
		}
		time.Sleep(min(d, 100*time.Millisecond))
	}
}

// leaseGiven is the lease the store gives a request of d: d, or more for
// a store that rounds leases up (etcd: whole seconds, with a minimum), as
// the Validity of a plain lock of d reports. Places are leases of the
// same kind, so a refusal may report up to that much.
func (s *suite) leaseGiven(ctx context.Context, d time.Duration) time.Duration {
	s.t.Helper()
	probe := fmt.Sprintf("lease-probe-%v", d)
	l := s.as(driver.KindLock)
	res := l.acquire(ctx, probe, probe, "", d)
	l.release(ctx, probe, probe)
	return max(d, res.Validity)
}

// unsupported fails the check unless err matches ErrUnsupported.
func (s *suite) unsupported(what string, err error) {
	s.t.Helper()
	if !errors.Is(err, driver.ErrUnsupported) {
		s.t.Errorf("%s: %v, want an error matching ErrUnsupported", what, err)
	}
}

// exclusive reports whether a hold of kind k (with one permit) keeps out
// another of the same kind.
func exclusive(k driver.Kind) bool { return k != driver.KindRead }
