package drivertest

import (
	"context"
	"slices"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The checks of driver.Inspector (Client.Inspect, ForceRelease).
func init() {
	in := has[driver.Inspector]
	checks = append(checks, []check{
		{"InspectFreeLock", inspectFreeLock, in},
		{"InspectHeldLock", inspectHeldLock, in},
		{"InspectLeavesOutLapsedHolds", inspectLeavesOutLapsedHolds, in},
		{"InspectChangesNothing", inspectChangesNothing, in},
		{"InspectIdentity", inspectIdentity, in},
		{"InspectOtherKinds", inspectOtherKinds, all(in, func(st driver.Store) bool {
			return st.Supports(driver.KindSemaphore) || st.Supports(driver.KindRead)
		})},
	}...)
}

func (s *suite) inspect(ctx context.Context, in driver.Inspector, key string) driver.LockInfo {
	s.t.Helper()
	info, err := in.InspectLock(ctx, s.ns, key)
	if err != nil {
		s.t.Fatalf("InspectLock(%s): %v", key, err)
	}
	return info
}

// A lock never taken is free with no fence minted; after a release it is
// free again and LastFence is the fence of that acquisition.
func inspectFreeLock(ctx context.Context, s *suite) {
	in := capability[driver.Inspector](s)
	if info := s.inspect(ctx, in, "k"); info.Held || info.Owner != "" || info.Fence != 0 || len(info.Holds) != 0 || info.LastFence != 0 {
		s.t.Fatalf("a lock never taken: %+v, want free, no fence", info)
	}
	res := s.acquire(ctx, "k", "a", "", 10*time.Second)
	s.release(ctx, "k", "a")
	if info := s.inspect(ctx, in, "k"); info.Held || len(info.Holds) != 0 || info.LastFence != res.Fence {
		s.t.Fatalf("after a release: %+v, want free with LastFence %d", info, res.Fence)
	}
}

// A held lock shows its owner, fence, every live hold (sorted by token)
// with its own lease, and the lock's lease.
func inspectHeldLock(ctx context.Context, s *suite) {
	in := capability[driver.Inspector](s)
	outer := s.acquire(ctx, "k", "tok-b", "owner", 10*time.Second)
	s.acquire(ctx, "k", "tok-a", "owner", 5*time.Second)
	info := s.inspect(ctx, in, "k")
	if !info.Held || info.Owner != "owner" || info.Fence != outer.Fence || info.LastFence != outer.Fence {
		s.t.Fatalf("held lock: %+v, want held by owner with fence %d", info, outer.Fence)
	}
	tokens := make([]string, 0, len(info.Holds))
	for _, h := range info.Holds {
		tokens = append(tokens, h.Token)
		if h.Kind != driver.KindLock || h.Fence != outer.Fence {
			s.t.Fatalf("hold %s: kind %v, fence %d; want lock, the holder's fence %d", h.Token, h.Kind, h.Fence, outer.Fence)
		}
	}
	if len(info.Others) != 0 || !info.AnyHeld() {
		s.t.Fatalf("a held lock: Others %+v, AnyHeld %v; want no other holds, AnyHeld true", info.Others, info.AnyHeld())
	}
	if !slices.Equal(tokens, []string{"tok-a", "tok-b"}) {
		s.t.Fatalf("holds %v, want [tok-a tok-b]", tokens)
	}
	if a, b := info.Holds[0].TTL, info.Holds[1].TTL; a <= 0 || a > 5*time.Second || b <= 5*time.Second || b > 10*time.Second {
		s.t.Fatalf("hold leases tok-a %v (want ≤5s), tok-b %v (want in (5s, 10s])", a, b)
	}
	if info.TTL <= 5*time.Second || info.TTL > 10*time.Second {
		s.t.Fatalf("lock lease %v, want the longest hold's (≤10s)", info.TTL)
	}
	// Without WithOwner the owner is the token.
	s.acquire(ctx, "single", "only", "", time.Second)
	if info := s.inspect(ctx, in, "single"); info.Owner != "only" || len(info.Holds) != 1 {
		s.t.Fatalf("single hold: %+v, want owner = token", info)
	}
}

// A re-entrant hold whose lease ended is not shown, though the lock is
// still held by the other.
func inspectLeavesOutLapsedHolds(ctx context.Context, s *suite) {
	in := capability[driver.Inspector](s)
	s.acquire(ctx, "k", "long", "owner", 10*time.Second)
	s.acquire(ctx, "k", "short", "owner", 100*time.Millisecond)
	s.waitLapsed(ctx, "k", "short", 5*time.Second)
	info := s.inspect(ctx, in, "k")
	if !info.Held || len(info.Holds) != 1 || info.Holds[0].Token != "long" {
		s.t.Fatalf("after the short hold lapsed: %+v, want only the long hold", info)
	}
	s.release(ctx, "k", "long")
	if info := s.inspect(ctx, in, "k"); info.Held {
		s.t.Fatalf("after the release: %+v, want free", info)
	}
}

// Inspecting neither extends a lease nor frees or takes the lock.
func inspectChangesNothing(ctx context.Context, s *suite) {
	in := capability[driver.Inspector](s)
	const lease = 300 * time.Millisecond
	for try := 1; ; try++ {
		start := time.Now()
		s.acquire(ctx, "k", "a", "", lease)
		for range 3 {
			s.inspect(ctx, in, "k")
		}
		if res := s.acquire(ctx, "k", "b", "", time.Second); !res.Acquired {
			break
		}
		if time.Since(start) < lease || try == 3 {
			s.t.Fatalf("another owner acquired an inspected lock %v after it was taken for %v", time.Since(start), lease)
		}
		// The round outlasted a's lease (a busy machine): b was right to
		// take the lock. Once more.
		s.release(ctx, "k", "b")
	}
	s.waitLapsed(ctx, "k", "a", 5*time.Second)
	if info := s.inspect(ctx, in, "k"); info.Held {
		s.t.Fatalf("after the lease: %+v, want free", info)
	}
}

// Request.Identity is optional to record, but a store that
// records it returns the identity of the acquisition that took the lock
// (a re-entry with another keeps it), none for a lock taken without one,
// and none once the lock is free again.
func inspectIdentity(ctx context.Context, s *suite) {
	in := capability[driver.Inspector](s)
	acquire := func(key, token, identity string) {
		s.t.Helper()
		res, err := s.st.Acquire(ctx, driver.Request{Ref: s.ref(key, token), Owner: "owner", TTL: 10 * time.Second, Identity: identity})
		if err != nil || !res.Acquired {
			s.t.Fatalf("Acquire(%s, token %s, identity %q): %+v, %v", key, token, identity, res, err)
		}
	}
	acquire("k", "a", "host-1:42")
	acquire("k", "b", "host-2:7") // re-entry by the same owner
	info := s.inspect(ctx, in, "k")
	if info.Identity == "" {
		s.t.Logf("%T does not record Request.Identity (allowed)", s.st)
	} else if info.Identity != "host-1:42" {
		s.t.Fatalf("Identity %q, want the first acquisition's, host-1:42", info.Identity)
	}
	s.release(ctx, "k", "a")
	s.release(ctx, "k", "b")
	if info := s.inspect(ctx, in, "k"); info.Identity != "" {
		s.t.Fatalf("a free lock: Identity %q, want none", info.Identity)
	}
	acquire("k", "c", "")
	if info := s.inspect(ctx, in, "k"); info.Identity != "" {
		s.t.Fatalf("a lock taken without identity: Identity %q, want none", info.Identity)
	}
	s.release(ctx, "k", "c")
}

// The permits of the semaphore and the read and write holds of the
// read-write lock of a name are in Others, each with its kind, fence and
// lease, sorted by kind then fence; the plain lock's fields say nothing of
// them, and a lapsed or released one is left out.
func inspectOtherKinds(ctx context.Context, s *suite) {
	in := capability[driver.Inspector](s)
	sem := s.st.Supports(driver.KindSemaphore)
	rw := s.st.Supports(driver.KindRead) && s.st.Supports(driver.KindWrite)
	var want []otherHold
	if sem {
		want = append(want, takeOtherPermits(ctx, s)...)
	}
	if rw {
		want = append(want, takeOtherReaders(ctx, s)...)
	}
	checkOthers(ctx, s, in, "k", want)
	// The plain lock's fields are its own.
	lock := s.acquire(ctx, "k", "lock", "", 10*time.Second)
	if info := s.inspect(ctx, in, "k"); !info.Held || info.Fence != lock.Fence || len(info.Holds) != 1 || len(info.Others) != len(want) {
		s.t.Fatalf("with the plain lock held too: %+v, want it held with fence %d, and %d other holds", info, lock.Fence, len(want))
	}
	s.release(ctx, "k", "lock")
	if sem {
		s.as(driver.KindSemaphore).release(ctx, "k", "p1")
		want = want[1:]
	}
	checkOthers(ctx, s, in, "k", want)
	if rw {
		w := s.rw(ctx, "writer", "w", write, 10*time.Second, 0)
		if !w.Acquired {
			s.t.Fatalf("writer: %+v", w)
		}
		checkOthers(ctx, s, in, "writer", []otherHold{{driver.KindWrite, "w", w.Fence, 10 * time.Second}})
	}
}

// otherHold is a hold inspectOtherKinds expects in LockInfo.Others.
type otherHold struct {
	kind  driver.Kind
	token string
	fence int64
	ttl   time.Duration
}

// takeOtherPermits takes two permits of semaphore k that stay, and one
// that lapses (and waits until it has).
func takeOtherPermits(ctx context.Context, s *suite) []otherHold {
	var held []otherHold
	for _, tok := range []string{"p1", "p2"} {
		res := s.permit(ctx, "k", tok, 3, 10*time.Second)
		if !res.Acquired {
			s.t.Fatalf("permit %s: %+v", tok, res)
		}
		held = append(held, otherHold{driver.KindSemaphore, tok, res.Fence, 10 * time.Second})
	}
	if res := s.permit(ctx, "k", "short", 3, 100*time.Millisecond); !res.Acquired {
		s.t.Fatalf("short permit: %+v", res)
	}
	s.as(driver.KindSemaphore).waitLapsed(ctx, "k", "short", 5*time.Second)
	return held
}

// takeOtherReaders takes two read holds of read-write lock k.
func takeOtherReaders(ctx context.Context, s *suite) []otherHold {
	var held []otherHold
	for _, tok := range []string{"r1", "r2"} {
		res := s.rw(ctx, "k", tok, read, 20*time.Second, 0)
		if !res.Acquired {
			s.t.Fatalf("reader %s: %+v", tok, res)
		}
		held = append(held, otherHold{driver.KindRead, tok, res.Fence, 20 * time.Second})
	}
	return held
}

// checkOthers checks that inspecting key, whose plain lock is free, shows
// exactly want in Others.
func checkOthers(ctx context.Context, s *suite, in driver.Inspector, key string, want []otherHold) {
	s.t.Helper()
	info := s.inspect(ctx, in, key)
	if info.Held || info.Owner != "" || info.Fence != 0 || len(info.Holds) != 0 || info.TTL != 0 || !info.AnyHeld() {
		s.t.Fatalf("%s, its plain lock free: %+v, want Held false and the lock's fields zero, AnyHeld true", key, info)
	}
	if len(info.Others) != len(want) {
		s.t.Fatalf("%s: Others %+v, want %d holds", key, info.Others, len(want))
	}
	for i, h := range info.Others {
		w := want[i]
		if h.Kind != w.kind || h.Token != w.token || h.Fence != w.fence || h.TTL <= 0 || h.TTL > s.leaseGiven(ctx, w.ttl) {
			s.t.Fatalf("%s: Others[%d] = %+v, want %v token %s fence %d with a lease of at most %v", key, i, h, w.kind, w.token, w.fence, w.ttl)
		}
	}
}
