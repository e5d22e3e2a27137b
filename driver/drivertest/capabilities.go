package drivertest

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// noError fails the check on err.
func (s *suite) noError(what string, err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// refused reports whether the store refused what with ErrUnsupported, which
// a store may answer, before any I/O, for a capability it has only in part;
// any other error fails the check.
func (s *suite) refused(what string, err error) bool {
	s.t.Helper()
	if errors.Is(err, driver.ErrUnsupported) {
		s.t.Logf("%T refuses %s (ErrUnsupported): nothing more to check", s.st, what)
		return true
	}
	s.noError(what, err)
	return false
}

// capability returns s's store as T; Run runs a check only on stores that
// have the capability it asks for.
func capability[T any](s *suite) T {
	c, ok := s.st.(T)
	if !ok {
		s.t.Fatalf("%T lacks the capability the check asks for", s.st)
	}
	return c
}

// watchRelease: a release after a refused acquire is notified, for every
// kind the store can watch.
func watchRelease(ctx context.Context, s *suite) {
	n := capability[driver.Notifier](s)
	for _, k := range s.supported() {
		if k == driver.KindRead {
			continue
		}
		key := "k-" + k.String()
		w, err := n.Watch(ctx, driver.WatchRequest{Ref: s.ref(k, key, "")})
		if errors.Is(err, driver.ErrUnsupported) {
			continue
		}
		if err != nil {
			s.t.Fatalf("Watch(%v): %v", k, err)
		}
		s.acquire(ctx, k, key, "a", 10*time.Second)
		s.acquire(ctx, k, key, "b", 10*time.Second) // refused: someone waits
		drainWatch(w)
		s.release(ctx, k, key, "a", 0)
		select {
		case <-w.C:
		case <-time.After(5 * time.Second):
			s.t.Errorf("no notification of the release of a %v", k)
		}
		w.Stop()
	}
}

// drainWatch empties w.C of what came before.
func drainWatch(w *driver.Watch) {
	for {
		select {
		case <-w.C:
		default:
			return
		}
	}
}

// lineOrder: the free lock goes to the first waiter in line, not to one
// who did not wait.
func lineOrder(ctx context.Context, s *suite) {
	l := capability[driver.Lines](s)
	inLine := func(tok string, place time.Duration) (driver.Result, error) {
		return l.AcquireInLine(ctx, s.request(driver.KindLock, "k", tok, 10*time.Second), driver.Turn{Place: place, Seq: 1})
	}
	in := func(tok string, place time.Duration) driver.Result {
		s.t.Helper()
		res, err := inLine(tok, place)
		s.noError("AcquireInLine", err)
		return res
	}
	res, err := inLine("a", driver.PlaceLease)
	if s.refused("AcquireInLine", err) {
		return
	}
	if !res.Acquired {
		s.t.Fatalf("first in an empty line: %+v", res)
	}
	if res := in("b", driver.PlaceLease); res.Acquired {
		s.t.Fatalf("second while held: %+v", res)
	}
	s.release(ctx, driver.KindLock, "k", "a", 0)
	if res := in("c", 0); res.Acquired {
		s.t.Fatalf("a caller not in line took the lock from the waiter: %+v", res)
	}
	if res := in("b", driver.PlaceLease); !res.Acquired {
		s.t.Fatalf("the first waiter, its turn come: %+v", res)
	}
}

// handOff: a release that frees the lock, no acquire refused meanwhile,
// takes it for next with a new fence.
func handOff(ctx context.Context, s *suite) {
	l := capability[driver.Lines](s)
	first := s.acquire(ctx, driver.KindLock, "k", "a", 10*time.Second)
	rel, got, err := l.HandOff(ctx, driver.ReleaseRequest{Ref: s.ref(driver.KindLock, "k", "a")},
		s.request(driver.KindLock, "k", "b", 10*time.Second))
	if s.refused("HandOff", err) {
		// A store that never hands a lock on did not release it either.
		if ttl, err := s.st.TTL(ctx, s.ref(driver.KindLock, "k", "a")); err != nil || ttl <= 0 {
			s.t.Fatalf("HandOff refused with ErrUnsupported, but the first hold is gone: ttl %v, %v", ttl, err)
		}
		return
	}
	if !rel.Held {
		s.t.Fatalf("hand-off's release: %+v", rel)
	}
	if got.Acquired && (got.Fence <= first.Fence || s.ttl(ctx, driver.KindLock, "k", "b") == 0) {
		s.t.Fatalf("handed: %+v after fence %d, want a greater fence and a live hold", got, first.Fence)
	}
	if !got.Acquired {
		if res := s.acquire(ctx, driver.KindLock, "k", "b", 10*time.Second); !res.Acquired {
			s.t.Fatalf("not handed, and not free: %+v", res)
		}
	}
}

// inspect: the holds of every kind of a name are reported.
func inspect(ctx context.Context, s *suite) {
	in := capability[driver.Inspector](s)
	res := s.acquire(ctx, driver.KindLock, "k", "a", 10*time.Second)
	others := 0
	if s.st.Supports(driver.KindSemaphore) {
		s.acquire(ctx, driver.KindSemaphore, "k", "p", 10*time.Second)
		others++
	}
	info, err := in.InspectLock(ctx, s.ns, "k")
	if s.refused("InspectLock", err) {
		return
	}
	if !info.Held || info.Fence != res.Fence || len(info.Holds) != 1 || info.Holds[0].Token != "a" || info.TTL <= 0 {
		s.t.Fatalf("InspectLock: %+v, want the hold of a with fence %d", info, res.Fence)
	}
	if len(info.Others) != others {
		s.t.Fatalf("InspectLock: others %+v, want %d", info.Others, others)
	}
}

// tickClaimed: a tick once claimed is not run again by another token.
func tickClaimed(ctx context.Context, s *suite) {
	tk := capability[driver.Ticker](s)
	tick := func(tok string) (driver.TickResult, error) {
		return tk.AcquireTick(ctx, driver.TickRequest{Request: s.request(driver.KindLock, "job", tok, 10*time.Second),
			Tick: "2026-01-01T00:00:00.000000000Z", RecordLife: time.Minute})
	}
	res, err := tick("a")
	if s.refused("AcquireTick", err) {
		return
	}
	if !res.Acquired || res.Claimed {
		s.t.Fatalf("first claim of a tick: %+v", res)
	}
	s.release(ctx, driver.KindLock, "job", "a", 0)
	res, err = tick("b")
	s.noError("AcquireTick", err)
	if res.Acquired || !res.Claimed || res.LastToken != "a" {
		s.t.Fatalf("second claim of the tick: %+v, want claimed by a", res)
	}
}
