package drivertest

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The checks of the plain lock's re-entry, and of the kinds together.
func init() {
	checks = append(checks, []check{
		{"LockReentryKeepsFence", reentryKeepsFence, nil},
		{"LockLapsedHoldIsGone", lapsedHoldIsGone, nil},
		{"UnsupportedKindRefused", unsupportedKindRefused, nil},
		{"KindsApart", kindsApart, nil},
		{"MixedRenewBatch", mixedRenewBatch, nil},
	}...)
}

func reentryKeepsFence(ctx context.Context, s *suite) {
	outer := s.acquire(ctx, "k", "a", "owner", 10*time.Second)
	inner := s.acquire(ctx, "k", "b", "owner", time.Second)
	if !inner.Acquired || inner.Fence != outer.Fence || inner.Holds != 2 {
		s.t.Fatalf("re-entry: %+v, want acquired with fence %d and 2 holds", inner, outer.Fence)
	}
	if other := s.acquire(ctx, "k", "c", "someone else", time.Second); other.Acquired {
		s.t.Fatal("another owner acquired a re-entered lock")
	}
	if rel := s.release(ctx, "k", "b"); !rel.Held || rel.Remaining != 1 {
		s.t.Fatalf("inner release: %+v, want 1 hold left", rel)
	}
	if other := s.acquire(ctx, "k", "c", "someone else", time.Second); other.Acquired {
		s.t.Fatal("another owner acquired the lock while a hold remained")
	}
	if rel := s.release(ctx, "k", "a"); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("outer release: %+v, want the lock freed", rel)
	}
	if next := s.acquire(ctx, "k", "d", "", time.Second); !next.Acquired || next.Fence <= outer.Fence {
		s.t.Fatalf("after both releases: %+v, want acquired with a fence above %d", next, outer.Fence)
	}
}

// A hold whose lease ended is gone although another hold of the same owner
// keeps the lock: it cannot be renewed or released, is not counted, and does
// not keep the lock once the other holds are released.
func lapsedHoldIsGone(ctx context.Context, s *suite) {
	outer := s.acquire(ctx, "k", "a", "owner", 10*time.Second)
	inner := s.acquire(ctx, "k", "b", "owner", 150*time.Millisecond)
	if !inner.Acquired || inner.Holds != 2 {
		s.t.Fatalf("re-entry: %+v, want acquired with 2 holds", inner)
	}
	// A store that rounds leases up (etcd: whole seconds) says so in
	// Validity; the hold's own lease is that long then.
	own := max(150*time.Millisecond, inner.Validity)
	if ttl := s.ttlOf(ctx, "k", "b"); ttl > own {
		s.t.Fatalf("TTL of a 150ms hold (granted %v) re-entering a 10s one: %v, want the hold's own lease (at most %v)", inner.Validity, ttl, own)
	}
	s.waitLapsed(ctx, "k", "b", 5*time.Second)
	if r := s.renew(ctx, "k", "b", time.Minute); r.Held {
		s.t.Fatal("renewal of a lapsed hold succeeded (it must not re-create it)")
	}
	if rel := s.release(ctx, "k", "b"); rel.Held {
		s.t.Fatalf("release of a lapsed hold: %+v, want not held", rel)
	}
	s.notHeld(ctx, "k", "b", "a lapsed hold")

	// Another short hold, lapsed too: neither counts.
	again := s.acquire(ctx, "k", "c", "owner", 150*time.Millisecond)
	if !again.Acquired || again.Fence != outer.Fence || again.Holds != 2 {
		s.t.Fatalf("re-entry after a lapsed hold: %+v, want acquired with fence %d and 2 holds (the lapsed one not counted)",
			again, outer.Fence)
	}
	s.waitLapsed(ctx, "k", "c", 5*time.Second)
	if ttl := s.ttlOf(ctx, "k", "a"); ttl <= 0 {
		s.t.Fatal("the 10s hold is gone, want it still held")
	}
	if rel := s.release(ctx, "k", "a"); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release of the last live hold: %+v, want held and 0 remaining", rel)
	}
	if next := s.acquire(ctx, "k", "d", "someone else", time.Second); !next.Acquired || next.Fence <= outer.Fence {
		s.t.Fatalf("another owner after the last live hold was released: %+v, want acquired with a fence above %d",
			next, outer.Fence)
	}
}

// Every request of a kind the store does not keep answers ErrUnsupported,
// and so does every kind beyond the four.
func unsupportedKindRefused(ctx context.Context, s *suite) {
	if !s.st.Supports(driver.KindLock) {
		s.t.Fatalf("%T does not support KindLock", s.st)
	}
	for _, k := range append(kinds, driver.KindWrite+1) {
		if k <= driver.KindWrite && s.st.Supports(k) {
			continue
		}
		u := s.as(k)
		_, err := s.st.Acquire(ctx, u.request("k", "a", 10*time.Second))
		u.unsupported("Acquire of a "+k.String(), err)
		_, err = s.st.Release(ctx, driver.ReleaseRequest{Ref: u.ref("k", "a")})
		u.unsupported("Release of a "+k.String(), err)
		_, err = s.st.Renew(ctx, []driver.RenewRequest{{Ref: u.ref("k", "a"), TTL: time.Second}})
		u.unsupported("Renew of a "+k.String(), err)
		_, err = s.st.TTL(ctx, u.ref("k", "a"))
		u.unsupported("TTL of a "+k.String(), err)
		if n, ok := s.st.(driver.Notifier); ok {
			_, err = n.Watch(ctx, driver.WatchRequest{Ref: u.ref("k", "")})
			u.unsupported("Watch of a "+k.String(), err)
		}
	}
}

// The plain lock, the semaphore and the read-write lock of one name are
// apart: each is taken while the others are held, and a release with the
// token of another kind's hold finds nothing.
func kindsApart(ctx context.Context, s *suite) {
	for _, k := range kinds {
		if k == driver.KindRead || !s.st.Supports(k) {
			continue // the write hold is the read-write lock's exclusive one
		}
		if res := s.as(k).acquire(ctx, "k", "a-"+k.String(), "", 10*time.Second); !res.Acquired {
			s.t.Fatalf("%v of a name whose other kinds are held: %+v, want acquired", k, res)
		}
	}
	for _, k := range kinds {
		if k == driver.KindLock || k == driver.KindRead || !s.st.Supports(k) {
			continue
		}
		if res := s.as(k).release(ctx, "k", "a-lock"); res.Held {
			s.t.Fatalf("%v release with the lock's token: %+v, want not held", k, res)
		}
	}
	if ttl := s.ttlOf(ctx, "k", "a-lock"); ttl <= 0 {
		s.t.Fatal("the plain lock is gone after releases of other kinds with its token")
	}
}

// One Renew batch may mix kinds: each hold is renewed as its kind's, in
// the order of the batch.
func mixedRenewBatch(ctx context.Context, s *suite) {
	var reqs []driver.RenewRequest
	for _, k := range kinds {
		if k == driver.KindRead || !s.st.Supports(k) {
			continue
		}
		tok := "a-" + k.String()
		s.as(k).acquire(ctx, "k", tok, "", time.Second)
		reqs = append(reqs, driver.RenewRequest{Ref: s.as(k).ref("k", tok), TTL: 20 * time.Second})
	}
	reqs = append(reqs, driver.RenewRequest{Ref: s.ref("k", "nobody"), TTL: 20 * time.Second})
	res, err := s.st.Renew(ctx, reqs)
	if err != nil || len(res) != len(reqs) {
		s.t.Fatalf("Renew of a mixed batch: %v %v", res, err)
	}
	for i, r := range res {
		want := i < len(reqs)-1
		if r.Err != nil || r.Held != want {
			s.t.Errorf("renewal %d (%v): %+v, want held %v", i, reqs[i].Kind, r, want)
		}
		if want {
			if ttl := s.as(reqs[i].Kind).ttlOf(ctx, "k", reqs[i].Token); ttl <= 10*time.Second {
				s.t.Errorf("%v lease after a renewal to 20s: %v", reqs[i].Kind, ttl)
			}
		}
	}
}
