package fencelocktest

import (
	"context"
	"time"

	"github.com/fencelock/fencelock"
)

// The checks of fencelock.FairBackend (the line of waiters of
// WithFairness). A backend without it has them skipped, with the reason.
func init() {
	checks = append(checks, []struct {
		name string
		run  func(ctx context.Context, s *suite)
	}{
		{"FairLineOrder", fairCheck(fairLineOrder)},
		{"FairSingleAttemptDoesNotJoin", fairCheck(fairSingleAttemptDoesNotJoin)},
		{"FairReleaseLeavesLine", fairCheck(fairReleaseLeavesLine)},
		{"FairPlaceLapses", fairCheck(fairPlaceLapses)},
		{"FairReentryDoesNotWait", fairCheck(fairReentryDoesNotWait)},
		{"FairReentryLeavesLine", fairCheck(fairReentryLeavesLine)},
		{"FairGrantReentryLeavesLine", grantCheck(fairGrantReentryLeavesLine)},
		{"FairTurnIsNotified", fairCheck(fairTurnIsNotified)},
		{"FairGrant", grantCheck(fairGrant)},
	}...)
}

// grantCheck runs check with the backend's FairGranter, or skips it.
func grantCheck(check func(ctx context.Context, s *suite, fg fencelock.FairGranter)) func(ctx context.Context, s *suite) {
	return capabilityCheck("releases that hand the lock to a fair waiter", check)
}

// A release that frees the lock takes it for the first waiter in line that
// accepts grants, with a fence above the holder's, and announces it to that
// waiter's turn watch, naming the waiter's latest attempt. The waiter's
// next attempt completes the grant as a retry (same fence, one hold). A
// backend may decline grants in some configurations (the Redis backend
// with replica acknowledgement): the waiter is then told its turn with no
// grant, and its next attempt takes the lock.
func fairGrant(ctx context.Context, s *suite, fg fencelock.FairGranter) {
	const ttl, place, grant = 10 * time.Second, 30 * time.Second, 2 * time.Second
	holder := s.fairAcquire(ctx, fg, "k", "holder", ttl, place)
	attempt := func(seq int64) fencelock.AcquireResult {
		s.t.Helper()
		req := fencelock.AcquireRequest{Ref: s.ref("k", "first"), Owner: "first", TTL: ttl}
		res, err := fg.AcquireFairGrant(ctx, req, place, grant, seq)
		if err != nil {
			s.t.Fatalf("AcquireFairGrant(attempt %d): %v", seq, err)
		}
		return res
	}
	for seq := int64(1); seq <= 2; seq++ {
		if res := attempt(seq); res.Acquired {
			s.t.Fatalf("attempt %d while the lock is held: %+v, want refused", seq, res)
		}
	}
	w, err := fg.WatchTurn(ctx, s.ns, "k", "first")
	if err != nil {
		s.t.Fatalf("WatchTurn: %v", err)
	}
	defer w.Stop()
	s.release(ctx, "k", "holder")
	var g fencelock.Grant
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no turn notified within %v of the release, for the waiter first in line", 10*time.Second)
	}
	g, granted := w.TakeGrant()
	if !granted {
		s.t.Logf("%T declined to grant the lock (the waiter was told its turn): checking the turn instead", s.b)
		if res := attempt(3); !res.Acquired || res.Fence <= holder.Fence || res.Holds != 1 {
			s.t.Fatalf("the waiter's attempt on its turn: %+v, want acquired with a fence above %d", res, holder.Fence)
		}
		s.release(ctx, "k", "first")
		return
	}
	if g.Fence <= holder.Fence || g.Seq != 2 {
		s.t.Fatalf("grant %+v, want a fence above the holder's %d, naming attempt 2", g, holder.Fence)
	}
	if _, again := w.TakeGrant(); again {
		s.t.Fatal("TakeGrant returned the grant twice")
	}
	if ttl, err := s.b.TTL(ctx, s.ref("k", "first")); err != nil || ttl <= 0 || ttl > grant {
		s.t.Fatalf("the granted hold's lease: %v %v, want at most the grant %v", ttl, err, grant)
	}
	if res := attempt(3); !res.Acquired || res.Fence != g.Fence || res.Holds != 1 {
		s.t.Fatalf("the waiter's attempt after the grant: %+v, want acquired with the grant's fence %d and one hold", res, g.Fence)
	}
	s.release(ctx, "k", "first")
}

// fairCheck runs check with the backend's FairBackend, or skips it.
func fairCheck(check func(ctx context.Context, s *suite, fb fencelock.FairBackend)) func(ctx context.Context, s *suite) {
	return capabilityCheck("WithFairness", check)
}

// fairAcquire makes one fair attempt for token, joining the line (or
// keeping its place) for place.
func (s *suite) fairAcquire(ctx context.Context, fb fencelock.FairBackend, key, token string, ttl, place time.Duration) fencelock.AcquireResult {
	s.t.Helper()
	req := fencelock.AcquireRequest{Ref: s.ref(key, token), Owner: token, TTL: ttl}
	res, err := fb.AcquireFair(ctx, req, place)
	if err != nil {
		s.t.Fatalf("AcquireFair(%s, token %s, place %v): %v", key, token, place, err)
	}
	return res
}

// The free lock goes to the waiters in the order they joined the line, and
// every fence is above the one before.
func fairLineOrder(ctx context.Context, s *suite, fb fencelock.FairBackend) {
	const ttl, place = 10 * time.Second, 30 * time.Second
	last := s.fairAcquire(ctx, fb, "k", "holder", ttl, place)
	if !last.Acquired {
		s.t.Fatalf("fair acquire of a free lock with an empty line: %+v, want acquired", last)
	}
	waiters := []string{"w1", "w2", "w3"}
	for _, w := range waiters {
		if res := s.fairAcquire(ctx, fb, "k", w, ttl, place); res.Acquired || res.HolderTTL <= 0 {
			s.t.Fatalf("%s while the lock is held: %+v, want refused with the holder's lease", w, res)
		}
	}
	s.release(ctx, "k", "holder")
	for i, w := range waiters {
		for _, later := range waiters[i+1:] {
			if res := s.fairAcquire(ctx, fb, "k", later, ttl, place); res.Acquired {
				s.t.Fatalf("%s took the free lock while %s was ahead of it in line", later, w)
			} else if res.HolderTTL <= 0 || res.HolderTTL > place {
				s.t.Fatalf("%s refused with HolderTTL %v, want the first waiter's place (at most %v)", later, res.HolderTTL, place)
			}
		}
		res := s.fairAcquire(ctx, fb, "k", w, ttl, place)
		if !res.Acquired || res.Fence <= last.Fence {
			s.t.Fatalf("%s, first in line: %+v, want acquired with a fence above %d", w, res, last.Fence)
		}
		last = res
		s.release(ctx, "k", w)
	}
	// The line is empty again: anyone takes the free lock.
	if res := s.fairAcquire(ctx, fb, "k", "late", ttl, place); !res.Acquired {
		s.t.Fatalf("fair acquire after the line emptied: %+v, want acquired", res)
	}
}

// A single attempt (place 0) neither joins the line nor jumps it.
func fairSingleAttemptDoesNotJoin(ctx context.Context, s *suite, fb fencelock.FairBackend) {
	const ttl = 10 * time.Second
	s.fairAcquire(ctx, fb, "k", "holder", ttl, 0)
	if res := s.fairAcquire(ctx, fb, "k", "try", ttl, 0); res.Acquired {
		s.t.Fatal("a single attempt took a held lock")
	}
	s.fairAcquire(ctx, fb, "k", "waiter", ttl, 30*time.Second)
	s.release(ctx, "k", "holder")
	if res := s.fairAcquire(ctx, fb, "k", "try", ttl, 0); res.Acquired {
		s.t.Fatal("a single attempt took the free lock ahead of a waiter in line")
	}
	if res := s.fairAcquire(ctx, fb, "k", "waiter", ttl, 30*time.Second); !res.Acquired {
		s.t.Fatalf("the waiter, first in line after a single attempt: %+v, want acquired (the attempt must not join ahead)", res)
	}
}

// Release of a token that waits in line (holding nothing) removes its place.
func fairReleaseLeavesLine(ctx context.Context, s *suite, fb fencelock.FairBackend) {
	const ttl, place = 10 * time.Second, 30 * time.Second
	s.fairAcquire(ctx, fb, "k", "holder", ttl, place)
	s.fairAcquire(ctx, fb, "k", "quitter", ttl, place)
	s.fairAcquire(ctx, fb, "k", "next", ttl, place)
	if rel := s.release(ctx, "k", "quitter"); rel.Held {
		s.t.Fatalf("release of a waiter's token: %+v, want not held", rel)
	}
	s.release(ctx, "k", "holder")
	if res := s.fairAcquire(ctx, fb, "k", "next", ttl, place); !res.Acquired {
		s.t.Fatalf("the waiter behind one that left: %+v, want acquired at once", res)
	}
}

// A place whose lease ends is dropped: the waiter behind it gets the lock
// without the first one coming back.
func fairPlaceLapses(ctx context.Context, s *suite, fb fencelock.FairBackend) {
	const ttl, short = 10 * time.Second, 300 * time.Millisecond
	s.fairAcquire(ctx, fb, "k", "holder", ttl, short)
	s.fairAcquire(ctx, fb, "k", "gone", ttl, short) // never comes back
	s.fairAcquire(ctx, fb, "k", "next", ttl, 30*time.Second)
	s.release(ctx, "k", "holder")
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := s.fairAcquire(ctx, fb, "k", "next", ttl, 30*time.Second)
		if res.Acquired {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the lock was still refused %v after the first waiter's place of %v", 10*time.Second, short)
		}
		time.Sleep(min(max(res.HolderTTL, time.Millisecond), 100*time.Millisecond))
	}
}

// Re-entry by the owner does not wait behind the line.
func fairReentryDoesNotWait(ctx context.Context, s *suite, fb fencelock.FairBackend) {
	const ttl = 10 * time.Second
	outer := s.acquire(ctx, "k", "a", "owner", ttl)
	s.fairAcquire(ctx, fb, "k", "waiter", ttl, 30*time.Second)
	req := fencelock.AcquireRequest{Ref: s.ref("k", "b"), Owner: "owner", TTL: ttl}
	inner, err := fb.AcquireFair(ctx, req, 30*time.Second)
	if err != nil || !inner.Acquired || inner.Fence != outer.Fence || inner.Holds != 2 {
		s.t.Fatalf("fair re-entry with a waiter in line: %+v %v, want acquired with fence %d and 2 holds", inner, err, outer.Fence)
	}
}

// A waiter in line that gets the lock by re-entry (its owner took the lock
// meanwhile) leaves the line: its old place must not hold the free lock
// back from others once both holds are released.
func fairReentryLeavesLine(ctx context.Context, s *suite, fb fencelock.FairBackend) {
	const ttl, place = 10 * time.Second, 30 * time.Second
	attempt := func(token string) fencelock.AcquireResult {
		s.t.Helper()
		res, err := fb.AcquireFair(ctx, fencelock.AcquireRequest{Ref: s.ref("k", token), Owner: "owner", TTL: ttl}, place)
		if err != nil {
			s.t.Fatalf("AcquireFair(%s): %v", token, err)
		}
		return res
	}
	s.reenterFromLine(ctx, fb, ttl, place, attempt)
	if res := s.fairAcquire(ctx, fb, "k", "other", ttl, 0); !res.Acquired {
		s.t.Fatalf("another waiter once both holds are released: %+v, want acquired (no place left in line)", res)
	}
}

// As fairReentryLeavesLine, for a granted lock: a waiter that re-entered
// the lock granted to its owner's other waiter leaves the line, so that the
// release of both holds grants it nothing (a hold its client would not know
// of, with a fence and lease of its own).
func fairGrantReentryLeavesLine(ctx context.Context, s *suite, fg fencelock.FairGranter) {
	const ttl, place, grant = 10 * time.Second, 30 * time.Second, 2 * time.Second
	seq := int64(0)
	attempt := func(token string) fencelock.AcquireResult {
		s.t.Helper()
		seq++
		req := fencelock.AcquireRequest{Ref: s.ref("k", token), Owner: "owner", TTL: ttl}
		res, err := fg.AcquireFairGrant(ctx, req, place, grant, seq)
		if err != nil {
			s.t.Fatalf("AcquireFairGrant(%s): %v", token, err)
		}
		return res
	}
	s.reenterFromLine(ctx, fg, ttl, place, attempt) // the release grants the lock to a (or wakes it)
	if rel := s.release(ctx, "k", "b"); rel.Held {
		s.t.Fatalf("b's token holds the lock again after its release: %+v, want nothing granted to it", rel)
	}
	if res := s.acquire(ctx, "k", "other", "other", ttl); !res.Acquired {
		s.t.Fatalf("another client once both holds are released: %+v, want acquired", res)
	}
}

// reenterFromLine puts two waiters of one owner, a and b, in line behind
// a holder, releases the holder, lets a take the lock and b re-enter it,
// then releases both: the start of the checks of re-entry from the line.
func (s *suite) reenterFromLine(ctx context.Context, fb fencelock.FairBackend, ttl, place time.Duration, attempt func(token string) fencelock.AcquireResult) {
	s.t.Helper()
	s.fairAcquire(ctx, fb, "k", "holder", ttl, place)
	attempt("a")
	attempt("b")
	s.release(ctx, "k", "holder")
	outer := attempt("a")
	if !outer.Acquired {
		s.t.Fatalf("the first waiter on its turn: %+v, want acquired", outer)
	}
	if inner := attempt("b"); !inner.Acquired || inner.Fence != outer.Fence || inner.Holds != 2 {
		s.t.Fatalf("the second waiter, of the same owner: %+v, want re-entry with fence %d and 2 holds", inner, outer.Fence)
	}
	s.release(ctx, "k", "a")
	s.release(ctx, "k", "b")
}

// The first waiter in line is told when the lock is released.
func fairTurnIsNotified(ctx context.Context, s *suite, fb fencelock.FairBackend) {
	const ttl, place = 10 * time.Second, 30 * time.Second
	s.fairAcquire(ctx, fb, "k", "holder", ttl, place)
	s.fairAcquire(ctx, fb, "k", "first", ttl, place)
	w, err := fb.WatchTurn(ctx, s.ns, "k", "first")
	if err != nil {
		s.t.Fatalf("WatchTurn: %v", err)
	}
	defer w.Stop()
	s.release(ctx, "k", "holder")
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no notification within %v of the release, for the waiter first in line", 10*time.Second)
	}
}
