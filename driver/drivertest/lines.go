package drivertest

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The checks of driver.Lines: the line of waiters of WithFairness, grants,
// and hand-offs. A store that never hands a lock over, or grants nothing,
// is checked to release and wake instead.
func init() {
	lines := has[driver.Lines]
	notified := all(has[driver.Lines], has[driver.Notifier])
	checks = append(checks, []check{
		{"FairLineOrder", fairLineOrder, lines},
		{"FairSingleAttemptDoesNotJoin", fairSingleAttemptDoesNotJoin, lines},
		{"FairReleaseLeavesLine", fairReleaseLeavesLine, lines},
		{"FairPlaceLapses", fairPlaceLapses, lines},
		{"FairReentryDoesNotWait", fairReentryDoesNotWait, lines},
		{"FairReentryLeavesLine", fairReentryLeavesLine, lines},
		{"FairGrantReentryLeavesLine", fairGrantReentryLeavesLine, lines},
		{"FairTurnIsNotified", fairTurnIsNotified, notified},
		{"FairGrant", fairGrant, notified},
		{"HandOffTakesFreedLock", handOffTakesFreedLock, lines},
		{"HandOffNotWhenOthersWaited", handOffNotWhenOthersWaited, lines},
		{"HandOffNotWhileHoldsRemain", handOffNotWhileHoldsRemain, lines},
		{"HandOffRefusesTombstonedToken", handOffRefusesTombstonedToken, lines},
		{"HandOffOfNothingHeld", handOffOfNothingHeld, lines},
		{"HandOffWithFenceFloor", handOffWithFenceFloor, lines},
		{"LinesOfOtherKindsRefused", linesOfOtherKindsRefused, lines},
	}...)
}

// Lines are of the plain lock: a request of another kind answers
// ErrUnsupported, and changes nothing.
func linesOfOtherKindsRefused(ctx context.Context, s *suite) {
	l := capability[driver.Lines](s)
	for _, k := range kinds[1:] {
		u := s.as(k)
		_, err := l.AcquireInLine(ctx, u.request("k", "a", 10*time.Second), driver.Turn{Place: time.Second})
		u.unsupported("AcquireInLine of a "+k.String(), err)
		_, _, err = l.HandOff(ctx, driver.ReleaseRequest{Ref: u.ref("k", "a")}, u.request("k", "b", 10*time.Second))
		u.unsupported("HandOff of a "+k.String(), err)
	}
}

// A release that frees the lock takes it for the first waiter in line that
// accepts grants, with a fence above the holder's, and announces it to that
// waiter's turn watch, naming the waiter's latest attempt. The waiter's
// next attempt completes the grant as a retry (same fence, one hold). A
// backend may decline grants in some configurations (the Redis backend
// with replica acknowledgement): the waiter is then told its turn with no
// grant, and its next attempt takes the lock.
func fairGrant(ctx context.Context, s *suite) {
	const ttl, place, grant = 10 * time.Second, 30 * time.Second, 2 * time.Second
	holder := s.fairAcquire(ctx, "k", "holder", ttl, place)
	attempt := func(seq int64) driver.Result {
		s.t.Helper()
		req := driver.Request{Ref: s.ref("k", "first"), Owner: "first", TTL: ttl}
		res, err := capability[driver.Lines](s).AcquireInLine(ctx, req, driver.Turn{Place: place, Grant: grant, Seq: seq})
		if err != nil {
			s.t.Fatalf("AcquireInLine(attempt %d): %v", seq, err)
		}
		return res
	}
	for seq := int64(1); seq <= 2; seq++ {
		if res := attempt(seq); res.Acquired {
			s.t.Fatalf("attempt %d while the lock is held: %+v, want refused", seq, res)
		}
	}
	w, err := capability[driver.Notifier](s).Watch(ctx, driver.WatchRequest{Ref: s.ref("k", "first")})
	if err != nil {
		s.t.Fatalf("Watch of a turn: %v", err)
	}
	defer w.Stop()
	s.release(ctx, "k", "holder")
	var g driver.Grant
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no turn notified within %v of the release, for the waiter first in line", 10*time.Second)
	}
	g, granted := w.TakeGrant()
	if !granted {
		s.t.Logf("%T declined to grant the lock (the waiter was told its turn): checking the turn instead", s.st)
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
	if ttl, err := s.st.TTL(ctx, s.ref("k", "first")); err != nil || ttl <= 0 || ttl > grant {
		s.t.Fatalf("the granted hold's lease: %v %v, want at most the grant %v", ttl, err, grant)
	}
	if res := attempt(3); !res.Acquired || res.Fence != g.Fence || res.Holds != 1 {
		s.t.Fatalf("the waiter's attempt after the grant: %+v, want acquired with the grant's fence %d and one hold", res, g.Fence)
	}
	s.release(ctx, "k", "first")
}

// fairAcquire makes one fair attempt for token, joining the line (or
// keeping its place) for place.
func (s *suite) fairAcquire(ctx context.Context, key, token string, ttl, place time.Duration) driver.Result {
	s.t.Helper()
	req := driver.Request{Ref: s.ref(key, token), Owner: token, TTL: ttl}
	res, err := capability[driver.Lines](s).AcquireInLine(ctx, req, driver.Turn{Place: place})
	if err != nil {
		s.t.Fatalf("AcquireInLine(%s, token %s, place %v): %v", key, token, place, err)
	}
	return res
}

// The free lock goes to the waiters in the order they joined the line, and
// every fence is above the one before.
func fairLineOrder(ctx context.Context, s *suite) {
	const ttl, place = 10 * time.Second, 30 * time.Second
	last := s.fairAcquire(ctx, "k", "holder", ttl, place)
	if !last.Acquired {
		s.t.Fatalf("fair acquire of a free lock with an empty line: %+v, want acquired", last)
	}
	waiters := []string{"w1", "w2", "w3"}
	for _, w := range waiters {
		if res := s.fairAcquire(ctx, "k", w, ttl, place); res.Acquired || res.HolderTTL <= 0 {
			s.t.Fatalf("%s while the lock is held: %+v, want refused with the holder's lease", w, res)
		}
	}
	s.release(ctx, "k", "holder")
	for i, w := range waiters {
		for _, later := range waiters[i+1:] {
			if res := s.fairAcquire(ctx, "k", later, ttl, place); res.Acquired {
				s.t.Fatalf("%s took the free lock while %s was ahead of it in line", later, w)
			} else if res.HolderTTL <= 0 || res.HolderTTL > place {
				s.t.Fatalf("%s refused with HolderTTL %v, want the first waiter's place (at most %v)", later, res.HolderTTL, place)
			}
		}
		res := s.fairAcquire(ctx, "k", w, ttl, place)
		if !res.Acquired || res.Fence <= last.Fence {
			s.t.Fatalf("%s, first in line: %+v, want acquired with a fence above %d", w, res, last.Fence)
		}
		last = res
		s.release(ctx, "k", w)
	}
	// The line is empty again: anyone takes the free lock.
	if res := s.fairAcquire(ctx, "k", "late", ttl, place); !res.Acquired {
		s.t.Fatalf("fair acquire after the line emptied: %+v, want acquired", res)
	}
}

// A single attempt (place 0) neither joins the line nor jumps it.
func fairSingleAttemptDoesNotJoin(ctx context.Context, s *suite) {
	const ttl = 10 * time.Second
	s.fairAcquire(ctx, "k", "holder", ttl, 0)
	if res := s.fairAcquire(ctx, "k", "try", ttl, 0); res.Acquired {
		s.t.Fatal("a single attempt took a held lock")
	}
	s.fairAcquire(ctx, "k", "waiter", ttl, 30*time.Second)
	s.release(ctx, "k", "holder")
	if res := s.fairAcquire(ctx, "k", "try", ttl, 0); res.Acquired {
		s.t.Fatal("a single attempt took the free lock ahead of a waiter in line")
	}
	if res := s.fairAcquire(ctx, "k", "waiter", ttl, 30*time.Second); !res.Acquired {
		s.t.Fatalf("the waiter, first in line after a single attempt: %+v, want acquired (the attempt must not join ahead)", res)
	}
}

// Release of a token that waits in line (holding nothing) removes its place.
func fairReleaseLeavesLine(ctx context.Context, s *suite) {
	const ttl, place = 10 * time.Second, 30 * time.Second
	s.fairAcquire(ctx, "k", "holder", ttl, place)
	s.fairAcquire(ctx, "k", "quitter", ttl, place)
	s.fairAcquire(ctx, "k", "next", ttl, place)
	if rel := s.release(ctx, "k", "quitter"); rel.Held {
		s.t.Fatalf("release of a waiter's token: %+v, want not held", rel)
	}
	s.release(ctx, "k", "holder")
	if res := s.fairAcquire(ctx, "k", "next", ttl, place); !res.Acquired {
		s.t.Fatalf("the waiter behind one that left: %+v, want acquired at once", res)
	}
}

// A place whose lease ends is dropped: the waiter behind it gets the lock
// without the first one coming back.
func fairPlaceLapses(ctx context.Context, s *suite) {
	const ttl, short = 10 * time.Second, 300 * time.Millisecond
	s.fairAcquire(ctx, "k", "holder", ttl, short)
	s.fairAcquire(ctx, "k", "gone", ttl, short) // never comes back
	s.fairAcquire(ctx, "k", "next", ttl, 30*time.Second)
	s.release(ctx, "k", "holder")
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := s.fairAcquire(ctx, "k", "next", ttl, 30*time.Second)
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
func fairReentryDoesNotWait(ctx context.Context, s *suite) {
	const ttl = 10 * time.Second
	outer := s.acquire(ctx, "k", "a", "owner", ttl)
	s.fairAcquire(ctx, "k", "waiter", ttl, 30*time.Second)
	req := driver.Request{Ref: s.ref("k", "b"), Owner: "owner", TTL: ttl}
	inner, err := capability[driver.Lines](s).AcquireInLine(ctx, req, driver.Turn{Place: 30 * time.Second})
	if err != nil || !inner.Acquired || inner.Fence != outer.Fence || inner.Holds != 2 {
		s.t.Fatalf("fair re-entry with a waiter in line: %+v %v, want acquired with fence %d and 2 holds", inner, err, outer.Fence)
	}
}

// A waiter in line that gets the lock by re-entry (its owner took the lock
// meanwhile) leaves the line: its old place must not hold the free lock
// back from others once both holds are released.
func fairReentryLeavesLine(ctx context.Context, s *suite) {
	const ttl, place = 10 * time.Second, 30 * time.Second
	attempt := func(token string) driver.Result {
		s.t.Helper()
		res, err := capability[driver.Lines](s).AcquireInLine(ctx, driver.Request{Ref: s.ref("k", token), Owner: "owner", TTL: ttl}, driver.Turn{Place: place})
		if err != nil {
			s.t.Fatalf("AcquireInLine(%s): %v", token, err)
		}
		return res
	}
	s.reenterFromLine(ctx, ttl, place, attempt)
	if res := s.fairAcquire(ctx, "k", "other", ttl, 0); !res.Acquired {
		s.t.Fatalf("another waiter once both holds are released: %+v, want acquired (no place left in line)", res)
	}
}

// As fairReentryLeavesLine, for a granted lock: a waiter that re-entered
// the lock granted to its owner's other waiter leaves the line, so that the
// release of both holds grants it nothing (a hold its client would not know
// of, with a fence and lease of its own).
func fairGrantReentryLeavesLine(ctx context.Context, s *suite) {
	const ttl, place, grant = 10 * time.Second, 30 * time.Second, 2 * time.Second
	seq := int64(0)
	attempt := func(token string) driver.Result {
		s.t.Helper()
		seq++
		req := driver.Request{Ref: s.ref("k", token), Owner: "owner", TTL: ttl}
		res, err := capability[driver.Lines](s).AcquireInLine(ctx, req, driver.Turn{Place: place, Grant: grant, Seq: seq})
		if err != nil {
			s.t.Fatalf("AcquireInLine(%s): %v", token, err)
		}
		return res
	}
	s.reenterFromLine(ctx, ttl, place, attempt) // the release grants the lock to a (or wakes it)
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
func (s *suite) reenterFromLine(ctx context.Context, ttl, place time.Duration, attempt func(token string) driver.Result) {
	s.t.Helper()
	s.fairAcquire(ctx, "k", "holder", ttl, place)
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
func fairTurnIsNotified(ctx context.Context, s *suite) {
	const ttl, place = 10 * time.Second, 30 * time.Second
	s.fairAcquire(ctx, "k", "holder", ttl, place)
	s.fairAcquire(ctx, "k", "first", ttl, place)
	w, err := capability[driver.Notifier](s).Watch(ctx, driver.WatchRequest{Ref: s.ref("k", "first")})
	if err != nil {
		s.t.Fatalf("Watch of a turn: %v", err)
	}
	defer w.Stop()
	s.release(ctx, "k", "holder")
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no notification within %v of the release, for the waiter first in line", 10*time.Second)
	}
}

// handOff releases token's hold, handing the lock to next (a new request
// with lease ttl and no fence floor).
func (s *suite) handOff(ctx context.Context, key, token, next string, ttl time.Duration) (driver.ReleaseResult, driver.Result) {
	s.t.Helper()
	return s.handOffFloor(ctx, key, token, next, ttl, 0)
}

func (s *suite) handOffFloor(ctx context.Context, key, token, next string, ttl time.Duration, floor int64) (driver.ReleaseResult, driver.Result) {
	s.t.Helper()
	req := driver.Request{Ref: s.ref(key, next), Owner: next, TTL: ttl, FenceFloor: floor}
	rel, acq, err := capability[driver.Lines](s).HandOff(ctx, driver.ReleaseRequest{Ref: s.ref(key, token)}, req)
	if err != nil {
		s.t.Fatalf("HandOff(%s, token %s, next %s): %v", key, token, next, err)
	}
	return rel, acq
}

// A release that frees a lock nobody else asked for hands it to next: a new
// hold with a fence above the holder's and next's lease; nobody else can
// take it, and next releases it as any holder.
func handOffTakesFreedLock(ctx context.Context, s *suite) {
	const ttl = 10 * time.Second
	first := s.acquire(ctx, "k", "a", "", ttl)
	rel, next := s.handOff(ctx, "k", "a", "b", ttl)
	if !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release of the lone hold: %+v, want held and 0 remaining", rel)
	}
	if s.declined(ctx, next, first.Fence) {
		return
	}
	if !next.Acquired || next.Fence <= first.Fence || next.Holds != 1 {
		s.t.Fatalf("the hand-off: %+v, want acquired with a fence above %d and one hold", next, first.Fence)
	}
	if ttlLeft, err := s.st.TTL(ctx, s.ref("k", "b")); err != nil || ttlLeft <= ttl/2 || ttlLeft > ttl {
		s.t.Fatalf("the handed hold's lease: %v %v, want about %v", ttlLeft, err, ttl)
	}
	if _, err := s.st.TTL(ctx, s.ref("k", "a")); !errors.Is(err, driver.ErrNotHeld) {
		s.t.Fatalf("TTL of the released hold: %v, want ErrNotHeld", err)
	}
	if other := s.acquire(ctx, "k", "c", "", ttl); other.Acquired {
		s.t.Fatalf("another token while the handed hold runs: %+v, want refused", other)
	}
	if retry := s.acquire(ctx, "k", "b", "", ttl); !retry.Acquired || retry.Fence != next.Fence || retry.Holds != 1 {
		s.t.Fatalf("an acquire by the handed token (a retry): %+v, want the hand-off's fence %d and one hold", retry, next.Fence)
	}
	if rel := s.release(ctx, "k", "b"); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release of the handed hold: %+v, want held and 0 remaining", rel)
	}
	if after := s.acquire(ctx, "k", "c", "", ttl); !after.Acquired || after.Fence <= next.Fence {
		s.t.Fatalf("acquire after the handed hold's release: %+v, want acquired with a fence above %d", after, next.Fence)
	}
}

// declined reports that the backend did not hand the lock over, which a
// backend may decline in some configurations (the Redis backend with replica
// acknowledgement releases only), after checking that the release then
// freed the lock for anyone (a fence above last).
func (s *suite) declined(ctx context.Context, next driver.Result, last int64) bool {
	s.t.Helper()
	if next.Acquired {
		return false
	}
	s.t.Logf("%T declined to hand the lock over: checking that the release freed it", s.st)
	if res := s.acquire(ctx, "k", "anyone", "", time.Second); !res.Acquired || res.Fence <= last {
		s.t.Fatalf("acquire after a release that declined the hand-off: %+v, want acquired with a fence above %d", res, last)
	}
	s.release(ctx, "k", "anyone")
	return true
}

// An acquire refused while the lock was held means someone else may be
// waiting: the release frees the lock and wakes the waiters instead of
// handing it over.
func handOffNotWhenOthersWaited(ctx context.Context, s *suite) {
	const ttl = 10 * time.Second
	s.acquire(ctx, "k", "a", "", ttl)
	var w *driver.Watch
	if has[driver.Notifier](s.st) {
		w = s.watch(ctx, "k")
	}
	if other := s.acquire(ctx, "k", "elsewhere", "", ttl); other.Acquired {
		s.t.Fatalf("acquire of the held lock: %+v, want refused", other)
	}
	rel, next := s.handOff(ctx, "k", "a", "b", ttl)
	if !rel.Held || next.Acquired {
		s.t.Fatalf("release after a refused acquire: %+v, hand-off %+v; want released, not handed over", rel, next)
	}
	if w != nil {
		select {
		case <-w.C:
		case <-time.After(10 * time.Second):
			s.t.Fatalf("no release notification within %v of a release that did not hand the lock over", 10*time.Second)
		}
	}
	if res := s.acquire(ctx, "k", "elsewhere", "", ttl); !res.Acquired {
		s.t.Fatalf("the refused waiter's next attempt: %+v, want acquired", res)
	}
}

// A release that leaves other holds of the owner (re-entry) does not free
// the lock, so it hands nothing over.
func handOffNotWhileHoldsRemain(ctx context.Context, s *suite) {
	const ttl = 10 * time.Second
	s.acquire(ctx, "k", "a1", "owner", ttl)
	s.acquire(ctx, "k", "a2", "owner", ttl)
	rel, next := s.handOff(ctx, "k", "a1", "b", ttl)
	if !rel.Held || rel.Remaining != 1 || next.Acquired {
		s.t.Fatalf("release of one of two holds: %+v, hand-off %+v; want 1 remaining, not handed over", rel, next)
	}
	if _, err := s.st.TTL(ctx, s.ref("k", "b")); !errors.Is(err, driver.ErrNotHeld) {
		s.t.Fatalf("TTL of the would-be next: %v, want ErrNotHeld", err)
	}
	s.release(ctx, "k", "a2")
}

// The next token's tombstone (its caller gave up and released it) refuses
// the hand-off as it refuses an acquire: the lock is free afterwards.
func handOffRefusesTombstonedToken(ctx context.Context, s *suite) {
	const ttl = 10 * time.Second
	first := s.acquire(ctx, "k", "a", "", ttl)
	s.releaseTombstone(ctx, "k", "b", 5*time.Second)
	rel, next := s.handOff(ctx, "k", "a", "b", ttl)
	if !rel.Held || next.Acquired {
		s.t.Fatalf("hand-off to a tombstoned token: release %+v, hand-off %+v; want released, not handed over", rel, next)
	}
	if res := s.acquire(ctx, "k", "c", "", ttl); !res.Acquired || res.Fence <= first.Fence {
		s.t.Fatalf("acquire after the refused hand-off: %+v, want acquired with a fence above %d", res, first.Fence)
	}
}

// A release of a token the lock does not hold hands nothing over and
// disturbs nothing.
func handOffOfNothingHeld(ctx context.Context, s *suite) {
	const ttl = 10 * time.Second
	s.acquire(ctx, "k", "a", "", ttl)
	rel, next := s.handOff(ctx, "k", "stranger", "b", ttl)
	if rel.Held || next.Acquired {
		s.t.Fatalf("hand-off by a token that holds nothing: release %+v, hand-off %+v; want neither", rel, next)
	}
	if ttlLeft, err := s.st.TTL(ctx, s.ref("k", "a")); err != nil || ttlLeft <= 0 {
		s.t.Fatalf("the holder after a stranger's hand-off: %v %v, want still held", ttlLeft, err)
	}
	s.release(ctx, "k", "a")
	rel, next = s.handOff(ctx, "k", "a", "b", ttl)
	if rel.Held || next.Acquired {
		s.t.Fatalf("hand-off of a free lock: release %+v, hand-off %+v; want neither", rel, next)
	}
}

// The handed acquisition's fence is above next's FenceFloor, as an
// acquire's is.
func handOffWithFenceFloor(ctx context.Context, s *suite) {
	const ttl = 10 * time.Second
	first := s.acquire(ctx, "k", "a", "", ttl)
	floor := first.Fence + 1_000_000_000_000
	_, next := s.handOffFloor(ctx, "k", "a", "b", ttl, floor)
	if s.declined(ctx, next, first.Fence) {
		return
	}
	if !next.Acquired || next.Fence <= floor {
		s.t.Fatalf("hand-off with FenceFloor %d: %+v, want a fence above the floor", floor, next)
	}
	s.release(ctx, "k", "b")
}
