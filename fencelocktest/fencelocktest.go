// Package fencelocktest checks that a fencelock.Backend keeps the contract
// the fencelock Client relies on, the way testing/slogtest checks a
// slog.Handler. A backend's own tests call Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		fencelocktest.Run(t, func(t *testing.T) fencelock.Backend {
//			return mybackend.New(startServer(t))
//		})
//	}
//
// Each check uses a namespace of its own, so one backend (one server) can
// serve them all. The checks take a few seconds: some wait for leases to
// expire.
package fencelocktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Run runs every check against backends made by newBackend, each check in a
// subtest of t.
func Run(t *testing.T, newBackend func(t *testing.T) fencelock.Backend) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t)
			s := &suite{t: t, b: b, ns: fmt.Sprintf("fencelocktest-%s-%08x", c.name, rand.Uint32())}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.run(ctx, s)
		})
	}
}

var checks = []struct {
	name string
	run  func(ctx context.Context, s *suite)
}{
	{"AcquireFree", acquireFree},
	{"HeldLockRefused", heldLockRefused},
	{"FencesStrictlyIncrease", fencesStrictlyIncrease},
	{"RetryIsIdempotent", retryIsIdempotent},
	{"ReentryKeepsFence", reentryKeepsFence},
	{"OtherTokenChangesNothing", otherTokenChangesNothing},
	{"RenewExtends", renewExtends},
	{"RenewNeverRecreates", renewNeverRecreates},
	{"ExpiryFreesLock", expiryFreesLock},
	{"MutualExclusion", mutualExclusion},
	{"ReleaseNotification", capabilityCheck("release notifications", releaseNotification)},
	{"ReleaseNotificationNotify", capabilityCheck("release notifications", releaseNotificationNotify)},
	{"ChangeNotification", capabilityCheck("notifications of acquisitions", changeNotification)},
	{"LapsedHoldIsGone", lapsedHoldIsGone},
	{"RetryExtendsHold", retryExtendsHold},
	{"TombstoneRefusesLateAcquire", tombstoneRefusesLateAcquire},
	{"TombstoneAfterRelease", tombstoneAfterRelease},
	{"ReleaseWithoutTombstoneAllowsNothingElse", releaseWithoutTombstoneAllowsNothingElse},
	{"FenceFloorRespected", fenceFloorRespected},
}

// capabilityCheck runs check with the backend as T, an optional interface
// of a fencelock.Backend, or skips it, naming T and what it offers.
func capabilityCheck[T any](offers string, check func(ctx context.Context, s *suite, b T)) func(ctx context.Context, s *suite) {
	return func(ctx context.Context, s *suite) {
		b, ok := s.b.(T)
		if !ok {
			s.t.Skipf("%T does not implement %v (%s): nothing to check", s.b, reflect.TypeFor[T](), offers)
		}
		check(ctx, s, b)
	}
}

// suite is one check's backend and namespace.
type suite struct {
	t  *testing.T
	b  fencelock.Backend
	ns string
}

func (s *suite) ref(key, token string) fencelock.LockRef {
	return fencelock.LockRef{Namespace: s.ns, Key: key, Token: token}
}

// acquire makes one attempt for owner (the token when owner is "").
func (s *suite) acquire(ctx context.Context, key, token, owner string, ttl time.Duration) fencelock.AcquireResult {
	s.t.Helper()
	if owner == "" {
		owner = token
	}
	res, err := s.b.Acquire(ctx, fencelock.AcquireRequest{Ref: s.ref(key, token), Owner: owner, TTL: ttl})
	if err != nil {
		s.t.Fatalf("Acquire(%s, token %s): %v", key, token, err)
	}
	return res
}

// release gives up token's hold without a tombstone.
func (s *suite) release(ctx context.Context, key, token string) fencelock.ReleaseResult {
	s.t.Helper()
	return s.releaseTombstone(ctx, key, token, 0)
}

// releaseTombstone gives up token's hold, asking the backend to refuse
// acquires with token for tombstone (none when 0).
func (s *suite) releaseTombstone(ctx context.Context, key, token string, tombstone time.Duration) fencelock.ReleaseResult {
	s.t.Helper()
	res, err := s.b.Release(ctx, fencelock.ReleaseRequest{Ref: s.ref(key, token), Tombstone: tombstone})
	if err != nil {
		s.t.Fatalf("Release(%s, token %s, tombstone %v): %v", key, token, tombstone, err)
	}
	return res
}

func (s *suite) renew(ctx context.Context, key, token string, ttl time.Duration) fencelock.RenewResult {
	s.t.Helper()
	res, err := s.b.Renew(ctx, []fencelock.RenewRequest{{Ref: s.ref(key, token), TTL: ttl}})
	if err != nil || len(res) != 1 {
		s.t.Fatalf("Renew(%s, token %s): %v %v", key, token, res, err)
	}
	if res[0].Err != nil {
		s.t.Fatalf("Renew(%s, token %s): %v", key, token, res[0].Err)
	}
	return res[0]
}

// waitLapsed waits, polling TTL, until token's hold has no lease left,
// failing the check if that takes more than limit.
func (s *suite) waitLapsed(ctx context.Context, key, token string, limit time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ttl, err := s.b.TTL(ctx, s.ref(key, token))
		if errors.Is(err, fencelock.ErrNotHeld) {
			return
		}
		if err != nil {
			s.t.Fatalf("TTL(%s, token %s): %v", key, token, err)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the hold of token %s still had a lease of %v after %v", token, ttl, limit)
		}
		time.Sleep(min(max(ttl, time.Millisecond), 100*time.Millisecond))
	}
}

func acquireFree(ctx context.Context, s *suite) {
	res := s.acquire(ctx, "k", "a", "", 10*time.Second)
	if !res.Acquired || res.Fence <= 0 || res.Holds != 1 {
		s.t.Fatalf("acquire of a free lock: %+v, want acquired, a positive fence, 1 hold", res)
	}
	ttl, err := s.b.TTL(ctx, s.ref("k", "a"))
	if err != nil || ttl <= 0 || ttl > 10*time.Second {
		s.t.Fatalf("TTL of a 10s lease: %v %v", ttl, err)
	}
	if rel := s.release(ctx, "k", "a"); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release: %+v, want held, 0 remaining", rel)
	}
	if _, err := s.b.TTL(ctx, s.ref("k", "a")); !errors.Is(err, fencelock.ErrNotHeld) {
		s.t.Fatalf("TTL after release: %v, want ErrNotHeld", err)
	}
}

func heldLockRefused(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "a", "", 10*time.Second)
	res := s.acquire(ctx, "k", "b", "", time.Second)
	if res.Acquired || res.Fence != 0 {
		s.t.Fatalf("acquire of a held lock by another owner: %+v, want refused", res)
	}
	if res.HolderTTL <= 0 || res.HolderTTL > 10*time.Second {
		s.t.Fatalf("HolderTTL %v, want the holder's remaining lease (at most 10s)", res.HolderTTL)
	}
}

func fencesStrictlyIncrease(ctx context.Context, s *suite) {
	var last int64
	for i := range 50 {
		token := fmt.Sprint("t", i)
		res := s.acquire(ctx, "k", token, "", time.Second)
		if !res.Acquired || res.Fence <= last {
			s.t.Fatalf("acquisition %d: %+v, want a fence above %d", i, res, last)
		}
		last = res.Fence
		s.release(ctx, "k", token)
	}
}

func retryIsIdempotent(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", 10*time.Second)
	again := s.acquire(ctx, "k", "a", "", 10*time.Second)
	if !again.Acquired || again.Fence != first.Fence || again.Holds != 1 {
		s.t.Fatalf("retried acquire: %+v, want acquired with fence %d and 1 hold", again, first.Fence)
	}
	if rel := s.release(ctx, "k", "a"); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("one release after a retried acquire: %+v, want the lock freed", rel)
	}
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

func otherTokenChangesNothing(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "mine", "", 2*time.Second)
	if rel := s.release(ctx, "k", "not-mine"); rel.Held {
		s.t.Fatal("released with another token")
	}
	if r := s.renew(ctx, "k", "not-mine", time.Minute); r.Held {
		s.t.Fatal("renewed with another token")
	}
	if _, err := s.b.TTL(ctx, s.ref("k", "not-mine")); !errors.Is(err, fencelock.ErrNotHeld) {
		s.t.Fatalf("TTL with another token: %v, want ErrNotHeld", err)
	}
	ttl, err := s.b.TTL(ctx, s.ref("k", "mine"))
	if err != nil || ttl > 2*time.Second {
		s.t.Fatalf("the holder's lease after another token's calls: %v %v, want at most 2s", ttl, err)
	}
}

func renewExtends(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "a", "", time.Second)
	if r := s.renew(ctx, "k", "a", time.Minute); !r.Held {
		s.t.Fatal("renewal of a held lock failed")
	}
	if ttl, err := s.b.TTL(ctx, s.ref("k", "a")); err != nil || ttl < 50*time.Second {
		s.t.Fatalf("TTL after renewing to 1m: %v %v", ttl, err)
	}
}

func renewNeverRecreates(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "a", "", time.Second)
	s.release(ctx, "k", "a")
	if r := s.renew(ctx, "k", "a", time.Minute); r.Held {
		s.t.Fatal("renewal succeeded on a released lock")
	}
	if res := s.acquire(ctx, "k", "b", "", time.Second); !res.Acquired {
		s.t.Fatal("a renewal after release left the lock held")
	}
}

func expiryFreesLock(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", 100*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := s.acquire(ctx, "k", "b", "", time.Second)
		if res.Acquired {
			if res.Fence <= first.Fence {
				s.t.Fatalf("fence after expiry %d, want above %d", res.Fence, first.Fence)
			}
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatal("a 100ms lease did not expire within 5s")
		}
		time.Sleep(max(res.HolderTTL, time.Millisecond))
	}
	if rel := s.release(ctx, "k", "a"); rel.Held {
		s.t.Fatal("the expired holder released its successor's lock")
	}
	if r := s.renew(ctx, "k", "a", time.Minute); r.Held {
		s.t.Fatal("the expired holder renewed its successor's lock")
	}
}

func mutualExclusion(ctx context.Context, s *suite) {
	var inside, maxInside, entered atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				token := fmt.Sprintf("w%d-%d", w, i)
				for {
					res, err := s.b.Acquire(ctx, fencelock.AcquireRequest{Ref: s.ref("k", token), Owner: token, TTL: 10 * time.Second})
					if err != nil {
						s.t.Error(err)
						return
					}
					if res.Acquired {
						break
					}
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				}
				if n := inside.Add(1); n > maxInside.Load() {
					maxInside.Store(n)
				}
				entered.Add(1)
				inside.Add(-1)
				if _, err := s.b.Release(ctx, fencelock.ReleaseRequest{Ref: s.ref("k", token)}); err != nil {
					s.t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if maxInside.Load() != 1 || entered.Load() != 160 {
		s.t.Fatalf("%d acquisitions, at most %d holders at once; want 160 and 1", entered.Load(), maxInside.Load())
	}
}

// A release that frees the lock wakes its watchers when an acquire was
// refused while it was held (a waiter, as the Client's).
func releaseNotification(ctx context.Context, s *suite, n fencelock.ReleaseNotifier) {
	w := s.watchHeld(ctx, n, "k", "a")
	defer w.Stop()
	if res := s.acquire(ctx, "k", "b", "", 30*time.Second); res.Acquired {
		s.t.Fatal("second token acquired a held lock")
	}
	s.release(ctx, "k", "a")
	s.awaitNotification(w, "a release after a refused acquire")
}

// A release with Notify wakes the watchers although no acquire was refused
// while the lock was held (an election's observers watch without waiting).
func releaseNotificationNotify(ctx context.Context, s *suite, n fencelock.ReleaseNotifier) {
	w := s.watchHeld(ctx, n, "k", "a")
	defer w.Stop()
	res, err := s.b.Release(ctx, fencelock.ReleaseRequest{Ref: s.ref("k", "a"), Notify: true})
	if err != nil || !res.Held {
		s.t.Fatalf("Release with Notify: %+v, %v", res, err)
	}
	s.awaitNotification(w, "a release with Notify")
}

// watchHeld takes key for token and watches the lock's releases.
func (s *suite) watchHeld(ctx context.Context, n fencelock.ReleaseNotifier, key, token string) *fencelock.Watch {
	s.t.Helper()
	s.acquire(ctx, key, token, "", 30*time.Second)
	w, err := n.WatchReleases(ctx, s.ns, key)
	if err != nil {
		s.t.Fatalf("WatchReleases(%s): %v", key, err)
	}
	return w
}

// awaitNotification fails unless w is woken within 5s of after.
func (s *suite) awaitNotification(w *fencelock.Watch, after string) {
	s.t.Helper()
	select {
	case <-w.C:
	case <-time.After(5 * time.Second):
		s.t.Fatalf("no notification within 5s of %s", after)
	}
}

// An acquisition with Notify wakes the lock's change watchers (an election's
// observers learn of a new leader), and so does a release with Notify.
func changeNotification(ctx context.Context, s *suite, n fencelock.ChangeNotifier) {
	w, err := n.WatchChanges(ctx, s.ns, "k")
	if err != nil {
		s.t.Fatalf("WatchChanges(k): %v", err)
	}
	defer w.Stop()
	res, err := s.b.Acquire(ctx, fencelock.AcquireRequest{Ref: s.ref("k", "a"), Owner: "a", TTL: 30 * time.Second, Notify: true})
	if err != nil || !res.Acquired {
		s.t.Fatalf("Acquire with Notify of a free lock: %+v, %v", res, err)
	}
	s.awaitNotification(w, "an acquisition with Notify")
	rel, err := s.b.Release(ctx, fencelock.ReleaseRequest{Ref: s.ref("k", "a"), Notify: true})
	if err != nil || !rel.Held {
		s.t.Fatalf("Release with Notify: %+v, %v", rel, err)
	}
	s.awaitNotification(w, "a release with Notify")
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
	// A backend that rounds leases up (etcd: whole seconds) says so in
	// Validity; the hold's own lease is that long then.
	own := max(150*time.Millisecond, inner.Validity)
	if ttl, err := s.b.TTL(ctx, s.ref("k", "b")); err == nil && ttl > own {
		s.t.Fatalf("TTL of a 150ms hold (granted %v) re-entering a 10s one: %v, want the hold's own lease (at most %v)", inner.Validity, ttl, own)
	}
	s.waitLapsed(ctx, "k", "b", 5*time.Second)
	if r := s.renew(ctx, "k", "b", time.Minute); r.Held {
		s.t.Fatal("renewal of a lapsed hold succeeded (it must not re-create it)")
	}
	if rel := s.release(ctx, "k", "b"); rel.Held {
		s.t.Fatalf("release of a lapsed hold: %+v, want not held", rel)
	}
	if _, err := s.b.TTL(ctx, s.ref("k", "b")); !errors.Is(err, fencelock.ErrNotHeld) {
		s.t.Fatalf("TTL of a lapsed hold: %v, want ErrNotHeld", err)
	}

	// Another short hold, lapsed too: neither counts.
	again := s.acquire(ctx, "k", "c", "owner", 150*time.Millisecond)
	if !again.Acquired || again.Fence != outer.Fence || again.Holds != 2 {
		s.t.Fatalf("re-entry after a lapsed hold: %+v, want acquired with fence %d and 2 holds (the lapsed one not counted)",
			again, outer.Fence)
	}
	s.waitLapsed(ctx, "k", "c", 5*time.Second)
	if ttl, err := s.b.TTL(ctx, s.ref("k", "a")); err != nil || ttl <= 0 {
		s.t.Fatalf("TTL of the 10s hold: %v %v, want it still held", ttl, err)
	}

	if rel := s.release(ctx, "k", "a"); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release of the last live hold: %+v, want held and 0 remaining", rel)
	}
	if next := s.acquire(ctx, "k", "d", "someone else", time.Second); !next.Acquired || next.Fence <= outer.Fence {
		s.t.Fatalf("another owner after the last live hold was released: %+v, want acquired with a fence above %d",
			next, outer.Fence)
	}
}

// An acquire with a token the lock holds sets that hold's lease to the new
// TTL, without a second hold or a new fence.
func retryExtendsHold(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", time.Second)
	retry := s.acquire(ctx, "k", "a", "", 10*time.Second)
	if !retry.Acquired || retry.Fence != first.Fence || retry.Holds != 1 {
		s.t.Fatalf("retried acquire: %+v, want acquired with fence %d and 1 hold", retry, first.Fence)
	}
	if ttl, err := s.b.TTL(ctx, s.ref("k", "a")); err != nil || ttl <= 5*time.Second {
		s.t.Fatalf("TTL after a retry with a 10s lease: %v %v, want above 5s", ttl, err)
	}
}

// A release with a tombstone of a token that holds nothing makes a later
// acquire with that token fail, and leaves the lock free for others.
func tombstoneRefusesLateAcquire(ctx context.Context, s *suite) {
	before := s.acquire(ctx, "k", "x", "", time.Second)
	s.release(ctx, "k", "x")
	if rel := s.releaseTombstone(ctx, "k", "late", 5*time.Second); rel.Held {
		s.t.Fatalf("release of a token that never held the lock: %+v, want not held", rel)
	}
	if late := s.acquire(ctx, "k", "late", "", 10*time.Second); late.Acquired || late.Fence != 0 {
		s.t.Fatalf("acquire with a tombstoned token: %+v, want refused", late)
	}
	if _, err := s.b.TTL(ctx, s.ref("k", "late")); !errors.Is(err, fencelock.ErrNotHeld) {
		s.t.Fatalf("TTL of the tombstoned token: %v, want ErrNotHeld", err)
	}
	if next := s.acquire(ctx, "k", "next", "", time.Second); !next.Acquired || next.Fence <= before.Fence {
		s.t.Fatalf("acquire after a refused late acquire: %+v, want acquired with a fence above %d", next, before.Fence)
	}
}

// A release with a tombstone of a held token frees the lock for every token
// but that one.
func tombstoneAfterRelease(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", 10*time.Second)
	if rel := s.releaseTombstone(ctx, "k", "a", 5*time.Second); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release with a tombstone: %+v, want held and 0 remaining", rel)
	}
	if again := s.acquire(ctx, "k", "a", "", 10*time.Second); again.Acquired {
		s.t.Fatalf("acquire with the tombstoned token: %+v, want refused", again)
	}
	if other := s.acquire(ctx, "k", "b", "", time.Second); !other.Acquired || other.Fence <= first.Fence {
		s.t.Fatalf("acquire with another token: %+v, want acquired with a fence above %d", other, first.Fence)
	}
}

// A release without a tombstone refuses nothing: the lock is free for other
// tokens and for the same one, whether or not the release found the hold.
func releaseWithoutTombstoneAllowsNothingElse(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", 10*time.Second)
	s.release(ctx, "k", "a")
	second := s.acquire(ctx, "k", "b", "", time.Second)
	if !second.Acquired || second.Fence <= first.Fence {
		s.t.Fatalf("acquire with another token after a plain release: %+v, want acquired with a fence above %d",
			second, first.Fence)
	}
	s.release(ctx, "k", "b")
	if third := s.acquire(ctx, "k", "a", "", time.Second); !third.Acquired || third.Fence <= second.Fence {
		s.t.Fatalf("acquire with the released token after a plain release: %+v, want acquired with a fence above %d",
			third, second.Fence)
	}
	s.release(ctx, "k", "a")
	if rel := s.release(ctx, "k", "never-held"); rel.Held {
		s.t.Fatalf("plain release of a token that never held the lock: %+v, want not held", rel)
	}
	if res := s.acquire(ctx, "k", "never-held", "", time.Second); !res.Acquired {
		s.t.Fatalf("acquire after a plain release that found nothing: %+v, want acquired", res)
	}
}

// fenceFloorRespected: a new acquisition's fence is above the request's
// FenceFloor (the largest fence the Client has seen), and later fences stay
// above it without the floor: fences never go back, even when the store's
// own memory of the last fence is behind (a promoted replica).
func fenceFloorRespected(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", time.Second)
	s.release(ctx, "k", "a")
	floor := first.Fence + 1_000_000_000_000 // far ahead of any clock-based fence
	res, err := s.b.Acquire(ctx, fencelock.AcquireRequest{Ref: s.ref("k", "b"), Owner: "b", TTL: time.Second, FenceFloor: floor})
	if err != nil || !res.Acquired || res.Fence <= floor {
		s.t.Fatalf("acquire with FenceFloor %d: %+v %v, want a fence above the floor", floor, res, err)
	}
	s.release(ctx, "k", "b")
	next := s.acquire(ctx, "k", "c", "", time.Second)
	if !next.Acquired || next.Fence <= res.Fence {
		s.t.Fatalf("acquire after a floored one: %+v, want a fence above %d", next, res.Fence)
	}
	// A floor below the store's own counter changes nothing.
	s.release(ctx, "k", "c")
	low, err := s.b.Acquire(ctx, fencelock.AcquireRequest{Ref: s.ref("k", "d"), Owner: "d", TTL: time.Second, FenceFloor: 1})
	if err != nil || !low.Acquired || low.Fence <= next.Fence {
		s.t.Fatalf("acquire with a low FenceFloor: %+v %v, want a fence above %d", low, err, next.Fence)
	}
}
