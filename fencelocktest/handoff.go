package fencelocktest

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock"
)

// The checks of fencelock.HandOffBackend (a release that hands the lock to
// a waiter of the same Client). A backend without it has them skipped, with
// the reason; one that declines hand-offs must still release.
func init() {
	checks = append(checks, []struct {
		name string
		run  func(ctx context.Context, s *suite)
	}{
		{"HandOffTakesFreedLock", handOffCheck(handOffTakesFreedLock)},
		{"HandOffNotWhenOthersWaited", handOffCheck(handOffNotWhenOthersWaited)},
		{"HandOffNotWhileHoldsRemain", handOffCheck(handOffNotWhileHoldsRemain)},
		{"HandOffRefusesTombstonedToken", handOffCheck(handOffRefusesTombstonedToken)},
		{"HandOffOfNothingHeld", handOffCheck(handOffOfNothingHeld)},
		{"HandOffWithFenceFloor", handOffCheck(handOffWithFenceFloor)},
	}...)
}

// handOffCheck runs check with the backend's HandOffBackend, or skips it.
func handOffCheck(check func(ctx context.Context, s *suite, hb fencelock.HandOffBackend)) func(ctx context.Context, s *suite) {
	return capabilityCheck("releases that hand the lock to a waiter of the same Client", check)
}

// handOff releases token's hold, handing the lock to next (a new request
// with lease ttl and no fence floor).
func (s *suite) handOff(ctx context.Context, hb fencelock.HandOffBackend, key, token, next string, ttl time.Duration) (fencelock.ReleaseResult, fencelock.AcquireResult) {
	s.t.Helper()
	return s.handOffFloor(ctx, hb, key, token, next, ttl, 0)
}

func (s *suite) handOffFloor(ctx context.Context, hb fencelock.HandOffBackend, key, token, next string, ttl time.Duration, floor int64) (fencelock.ReleaseResult, fencelock.AcquireResult) {
	s.t.Helper()
	req := fencelock.AcquireRequest{Ref: s.ref(key, next), Owner: next, TTL: ttl, FenceFloor: floor}
	rel, acq, err := hb.ReleaseHandOff(ctx, fencelock.ReleaseRequest{Ref: s.ref(key, token)}, req)
	if err != nil {
		s.t.Fatalf("ReleaseHandOff(%s, token %s, next %s): %v", key, token, next, err)
	}
	return rel, acq
}

// A release that frees a lock nobody else asked for hands it to next: a new
// hold with a fence above the holder's and next's lease; nobody else can
// take it, and next releases it as any holder.
func handOffTakesFreedLock(ctx context.Context, s *suite, hb fencelock.HandOffBackend) {
	const ttl = 10 * time.Second
	first := s.acquire(ctx, "k", "a", "", ttl)
	rel, next := s.handOff(ctx, hb, "k", "a", "b", ttl)
	if !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release of the lone hold: %+v, want held and 0 remaining", rel)
	}
	if s.declined(ctx, next, first.Fence) {
		return
	}
	if !next.Acquired || next.Fence <= first.Fence || next.Holds != 1 {
		s.t.Fatalf("the hand-off: %+v, want acquired with a fence above %d and one hold", next, first.Fence)
	}
	if ttlLeft, err := s.b.TTL(ctx, s.ref("k", "b")); err != nil || ttlLeft <= ttl/2 || ttlLeft > ttl {
		s.t.Fatalf("the handed hold's lease: %v %v, want about %v", ttlLeft, err, ttl)
	}
	if _, err := s.b.TTL(ctx, s.ref("k", "a")); !errors.Is(err, fencelock.ErrNotHeld) {
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
func (s *suite) declined(ctx context.Context, next fencelock.AcquireResult, last int64) bool {
	s.t.Helper()
	if next.Acquired {
		return false
	}
	s.t.Logf("%T declined to hand the lock over: checking that the release freed it", s.b)
	if res := s.acquire(ctx, "k", "anyone", "", time.Second); !res.Acquired || res.Fence <= last {
		s.t.Fatalf("acquire after a release that declined the hand-off: %+v, want acquired with a fence above %d", res, last)
	}
	s.release(ctx, "k", "anyone")
	return true
}

// An acquire refused while the lock was held means someone else may be
// waiting: the release frees the lock and wakes the waiters instead of
// handing it over.
func handOffNotWhenOthersWaited(ctx context.Context, s *suite, hb fencelock.HandOffBackend) {
	const ttl = 10 * time.Second
	s.acquire(ctx, "k", "a", "", ttl)
	w, err := s.watch(ctx, "k")
	if err != nil {
		s.t.Fatalf("WatchReleases: %v", err)
	}
	if w != nil {
		defer w.Stop()
	}
	if other := s.acquire(ctx, "k", "elsewhere", "", ttl); other.Acquired {
		s.t.Fatalf("acquire of the held lock: %+v, want refused", other)
	}
	rel, next := s.handOff(ctx, hb, "k", "a", "b", ttl)
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

// watch returns a release watch of key when the backend has notifications
// (nil otherwise).
func (s *suite) watch(ctx context.Context, key string) (*fencelock.Watch, error) {
	n, ok := s.b.(fencelock.ReleaseNotifier)
	if !ok {
		return nil, nil
	}
	w, err := n.WatchReleases(ctx, s.ns, key)
	if errors.Is(err, fencelock.ErrUnsupported) {
		return nil, nil
	}
	return w, err
}

// A release that leaves other holds of the owner (re-entry) does not free
// the lock, so it hands nothing over.
func handOffNotWhileHoldsRemain(ctx context.Context, s *suite, hb fencelock.HandOffBackend) {
	const ttl = 10 * time.Second
	s.acquire(ctx, "k", "a1", "owner", ttl)
	s.acquire(ctx, "k", "a2", "owner", ttl)
	rel, next := s.handOff(ctx, hb, "k", "a1", "b", ttl)
	if !rel.Held || rel.Remaining != 1 || next.Acquired {
		s.t.Fatalf("release of one of two holds: %+v, hand-off %+v; want 1 remaining, not handed over", rel, next)
	}
	if _, err := s.b.TTL(ctx, s.ref("k", "b")); !errors.Is(err, fencelock.ErrNotHeld) {
		s.t.Fatalf("TTL of the would-be next: %v, want ErrNotHeld", err)
	}
	s.release(ctx, "k", "a2")
}

// The next token's tombstone (its caller gave up and released it) refuses
// the hand-off as it refuses an acquire: the lock is free afterwards.
func handOffRefusesTombstonedToken(ctx context.Context, s *suite, hb fencelock.HandOffBackend) {
	const ttl = 10 * time.Second
	first := s.acquire(ctx, "k", "a", "", ttl)
	s.releaseTombstone(ctx, "k", "b", 5*time.Second)
	rel, next := s.handOff(ctx, hb, "k", "a", "b", ttl)
	if !rel.Held || next.Acquired {
		s.t.Fatalf("hand-off to a tombstoned token: release %+v, hand-off %+v; want released, not handed over", rel, next)
	}
	if res := s.acquire(ctx, "k", "c", "", ttl); !res.Acquired || res.Fence <= first.Fence {
		s.t.Fatalf("acquire after the refused hand-off: %+v, want acquired with a fence above %d", res, first.Fence)
	}
}

// A release of a token the lock does not hold hands nothing over and
// disturbs nothing.
func handOffOfNothingHeld(ctx context.Context, s *suite, hb fencelock.HandOffBackend) {
	const ttl = 10 * time.Second
	s.acquire(ctx, "k", "a", "", ttl)
	rel, next := s.handOff(ctx, hb, "k", "stranger", "b", ttl)
	if rel.Held || next.Acquired {
		s.t.Fatalf("hand-off by a token that holds nothing: release %+v, hand-off %+v; want neither", rel, next)
	}
	if ttlLeft, err := s.b.TTL(ctx, s.ref("k", "a")); err != nil || ttlLeft <= 0 {
		s.t.Fatalf("the holder after a stranger's hand-off: %v %v, want still held", ttlLeft, err)
	}
	s.release(ctx, "k", "a")
	rel, next = s.handOff(ctx, hb, "k", "a", "b", ttl)
	if rel.Held || next.Acquired {
		s.t.Fatalf("hand-off of a free lock: release %+v, hand-off %+v; want neither", rel, next)
	}
}

// The handed acquisition's fence is above next's FenceFloor, as an
// acquire's is.
func handOffWithFenceFloor(ctx context.Context, s *suite, hb fencelock.HandOffBackend) {
	const ttl = 10 * time.Second
	first := s.acquire(ctx, "k", "a", "", ttl)
	floor := first.Fence + 1_000_000_000_000
	_, next := s.handOffFloor(ctx, hb, "k", "a", "b", ttl, floor)
	if s.declined(ctx, next, first.Fence) {
		return
	}
	if !next.Acquired || next.Fence <= floor {
		s.t.Fatalf("hand-off with FenceFloor %d: %+v, want a fence above the floor", floor, next)
	}
	s.release(ctx, "k", "b")
}
