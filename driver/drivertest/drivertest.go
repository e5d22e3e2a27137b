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
// checks of a capability (Notifier, Lines, Inspector, Ticker) run when the
// store implements it, and skip a request it answers with ErrUnsupported.
// Each check uses a namespace of its own, so one store (one server) can
// serve them all. Some checks wait for leases to end.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/adapt"
)

// kinds are every kind of hold, in the order the checks run them.
var kinds = []driver.Kind{driver.KindLock, driver.KindSemaphore, driver.KindRead, driver.KindWrite}

// Run runs every check against stores made by newStore, each in a subtest
// of t: the core checks for each kind the store supports, then the checks
// that apply to what it supports and the capabilities it has. What a store
// lacks gets no subtest (nothing is skipped); UnsupportedKindRefused checks
// that it refuses the kinds it lacks.
func Run(t *testing.T, newStore func(t *testing.T) driver.Store) {
	probe := newStore(t)
	for _, k := range kinds {
		if !probe.Supports(k) {
			continue
		}
		for _, c := range coreChecks {
			t.Run(k.String()+"/"+c.name, func(t *testing.T) {
				s := newSuite(t, newStore, k.String()+c.name)
				c.run(s.ctx, s, k)
			})
		}
	}
	for _, c := range storeChecks {
		if c.applies != nil && !c.applies(probe) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			s := newSuite(t, newStore, c.name)
			c.run(s.ctx, s)
		})
	}
}

// suite is one check's store and namespace.
type suite struct {
	t   *testing.T
	st  driver.Store
	ns  string
	ctx context.Context
}

func newSuite(t *testing.T, newStore func(t *testing.T) driver.Store, name string) *suite {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &suite{t: t, st: newStore(t), ns: fmt.Sprintf("drivertest-%s-%08x", name, rand.Uint32()), ctx: ctx}
}

func (s *suite) ref(k driver.Kind, key, token string) driver.Ref {
	return driver.Ref{Kind: k, Namespace: s.ns, Key: key, Token: token}
}

// request is an acquire of kind k by token (its own owner), with one permit
// for a semaphore: every kind then excludes a second holder, except reads.
func (s *suite) request(k driver.Kind, key, token string, ttl time.Duration) driver.Request {
	return driver.Request{Ref: s.ref(k, key, token), Owner: token, TTL: ttl, Permits: 1}
}

func (s *suite) acquireReq(ctx context.Context, req driver.Request) driver.Result {
	s.t.Helper()
	res, err := s.st.Acquire(ctx, req)
	if err != nil {
		s.t.Fatalf("Acquire(%v %s, token %s): %v", req.Kind, req.Key, req.Token, err)
	}
	return res
}

func (s *suite) acquire(ctx context.Context, k driver.Kind, key, token string, ttl time.Duration) driver.Result {
	s.t.Helper()
	return s.acquireReq(ctx, s.request(k, key, token, ttl))
}

func (s *suite) release(ctx context.Context, k driver.Kind, key, token string, tombstone time.Duration) driver.ReleaseResult {
	s.t.Helper()
	res, err := s.st.Release(ctx, driver.ReleaseRequest{Ref: s.ref(k, key, token), Tombstone: tombstone})
	if err != nil {
		s.t.Fatalf("Release(%v %s, token %s): %v", k, key, token, err)
	}
	return res
}

func (s *suite) renew(ctx context.Context, k driver.Kind, key, token string, ttl time.Duration) driver.RenewResult {
	s.t.Helper()
	res, err := s.st.Renew(ctx, []driver.RenewRequest{{Ref: s.ref(k, key, token), TTL: ttl}})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		s.t.Fatalf("Renew(%v %s, token %s): %v %v", k, key, token, res, err)
	}
	return res[0]
}

// ttl returns the hold's lease, or 0 when the store says it is not held.
func (s *suite) ttl(ctx context.Context, k driver.Kind, key, token string) time.Duration {
	s.t.Helper()
	d, err := s.st.TTL(ctx, s.ref(k, key, token))
	if errors.Is(err, driver.ErrNotHeld) {
		return 0
	}
	if err != nil || d <= 0 {
		s.t.Fatalf("TTL(%v %s, token %s): %v, %v", k, key, token, d, err)
	}
	return d
}

// waitLapsed waits until token's hold has no lease left, failing the check
// if that takes longer than limit.
func (s *suite) waitLapsed(ctx context.Context, k driver.Kind, key, token string, limit time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		d := s.ttl(ctx, k, key, token)
		if d == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the %v hold of token %s still had a lease of %v after %v", k, token, d, limit)
		}
		time.Sleep(min(d, 100*time.Millisecond))
	}
}

// exclusive reports whether a hold of kind k (with one permit) keeps out
// another of the same kind.
func exclusive(k driver.Kind) bool { return k != driver.KindRead }

// RunBackend is Run for a store that implements only driver.Backend and its
// capability interfaces: each store newBackend makes is checked as the
// Client sees it, through the adapter that maps the Backend interfaces onto
// driver.Store.
func RunBackend(t *testing.T, newBackend func(t *testing.T) driver.Backend) {
	Run(t, func(t *testing.T) driver.Store { return adapt.Store(newBackend(t)) })
}
