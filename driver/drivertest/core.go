package drivertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// coreChecks hold for every kind of hold (s.k), each with one permit for
// a semaphore, so that every kind but reads excludes a second holder.
var coreChecks = []kindCheck{
	{"AcquireFree", acquireFree, nil},
	{"HeldRefused", heldRefused, nil},
	{"FencesStrictlyIncrease", fencesStrictlyIncrease, nil},
	{"RetryIsIdempotent", retryIsIdempotent, nil},
	{"RetryExtendsHold", retryExtendsHold, nil},
	{"OtherTokenChangesNothing", otherTokenChangesNothing, nil},
	{"RenewExtends", renewExtends, nil},
	{"RenewBatch", renewBatch, nil},
	{"RenewNeverRecreates", renewNeverRecreates, nil},
	{"ExpiryFrees", expiryFrees, nil},
	{"MutualExclusion", mutualExclusion, exclusive},
	{"TombstoneRefusesLateAcquire", tombstoneRefusesLateAcquire, nil},
	{"TombstoneAfterRelease", tombstoneAfterRelease, nil},
	{"ReleaseWithoutTombstoneAllowsNothingElse", releaseWithoutTombstoneAllowsNothingElse, nil},
	{"FenceFloorRespected", fenceFloorRespected, nil},
}

func acquireFree(ctx context.Context, s *suite) {
	res := s.acquire(ctx, "k", "a", "", 10*time.Second)
	if !res.Acquired || res.Fence <= 0 || res.Holds != 1 {
		s.t.Fatalf("acquire of a free %v: %+v, want acquired, a positive fence, 1 hold", s.k, res)
	}
	if ttl := s.ttlOf(ctx, "k", "a"); ttl <= 0 || ttl > 10*time.Second {
		s.t.Fatalf("TTL of a 10s lease: %v", ttl)
	}
	if rel := s.release(ctx, "k", "a"); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release: %+v, want held, 0 remaining", rel)
	}
	s.notHeld(ctx, "k", "a", "a released hold")
}

// A second holder is refused (and told the holder's lease), except a
// second reader, who shares the lock.
func heldRefused(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "a", "", 10*time.Second)
	res := s.acquire(ctx, "k", "b", "", time.Second)
	if !exclusive(s.k) {
		if !res.Acquired {
			s.t.Fatalf("a second reader: %+v, want acquired", res)
		}
		return
	}
	if res.Acquired || res.Fence != 0 {
		s.t.Fatalf("acquire of a held %v by another owner: %+v, want refused", s.k, res)
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
		s.t.Fatalf("one release after a retried acquire: %+v, want the hold gone", rel)
	}
	if res := s.acquire(ctx, "k", "b", "", time.Second); !res.Acquired {
		s.t.Fatalf("after the one release: %+v, want free", res)
	}
}

// An acquire with a token that holds sets that hold's lease to the new
// TTL, without a second hold or a new fence.
func retryExtendsHold(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", time.Second)
	retry := s.acquire(ctx, "k", "a", "", 10*time.Second)
	if !retry.Acquired || retry.Fence != first.Fence || retry.Holds != 1 {
		s.t.Fatalf("retried acquire: %+v, want acquired with fence %d and 1 hold", retry, first.Fence)
	}
	if ttl := s.ttlOf(ctx, "k", "a"); ttl <= 5*time.Second {
		s.t.Fatalf("TTL after a retry with a 10s lease: %v, want above 5s", ttl)
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
	s.notHeld(ctx, "k", "not-mine", "another token")
	if ttl := s.ttlOf(ctx, "k", "mine"); ttl <= 0 || ttl > 2*time.Second {
		s.t.Fatalf("the holder's lease after another token's calls: %v, want (0, 2s]", ttl)
	}
}

func renewExtends(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "a", "", time.Second)
	if r := s.renew(ctx, "k", "a", time.Minute); !r.Held {
		s.t.Fatal("renewal of a held hold failed")
	}
	if ttl := s.ttlOf(ctx, "k", "a"); ttl < 50*time.Second {
		s.t.Fatalf("TTL after renewing to 1m: %v", ttl)
	}
}

// A batch of renewals has one result per request, in order; a token
// without a hold renews nothing.
func renewBatch(ctx context.Context, s *suite) {
	for _, tok := range []string{"a", "b"} {
		if res := s.acquire(ctx, "k-"+tok, tok, "", 2*time.Second); !res.Acquired {
			s.t.Fatalf("acquire of k-%s: %+v", tok, res)
		}
	}
	batch, err := s.st.Renew(ctx, []driver.RenewRequest{
		{Ref: s.ref("k-a", "a"), TTL: 30 * time.Second},
		{Ref: s.ref("k-a", "nobody"), TTL: 30 * time.Second},
		{Ref: s.ref("k-b", "b"), TTL: 30 * time.Second},
	})
	if err != nil || len(batch) != 3 || !batch[0].Held || batch[1].Held || !batch[2].Held {
		s.t.Fatalf("renewal batch [a, nobody, b]: %+v %v, want held, not held, held", batch, err)
	}
	if ttl := s.ttlOf(ctx, "k-b", "b"); ttl <= 2*time.Second || ttl > 30*time.Second {
		s.t.Fatalf("lease after renewing with 30s: %v, want (2s, 30s]", ttl)
	}
	s.notHeld(ctx, "k-a", "nobody", "a token without a hold, after its renewal")
}

func renewNeverRecreates(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "a", "", time.Second)
	s.release(ctx, "k", "a")
	if r := s.renew(ctx, "k", "a", time.Minute); r.Held {
		s.t.Fatal("renewal succeeded on a released hold")
	}
	s.notHeld(ctx, "k", "a", "a released hold after its renewal")
	if res := s.acquire(ctx, "k", "b", "", time.Second); !res.Acquired {
		s.t.Fatal("a renewal after release left the hold in place")
	}
}

// A hold whose lease ended is gone without a release: another token takes
// its place with a larger fence, and the lapsed holder can neither release
// nor renew.
func expiryFrees(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", 100*time.Millisecond)
	if !exclusive(s.k) {
		s.waitLapsed(ctx, "k", "a", 5*time.Second)
	}
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
			s.t.Fatal("a 100ms lease did not end within 5s")
		}
		time.Sleep(max(res.HolderTTL, time.Millisecond))
	}
	if rel := s.release(ctx, "k", "a"); rel.Held {
		s.t.Fatal("the lapsed holder released a hold")
	}
	if r := s.renew(ctx, "k", "a", time.Minute); r.Held {
		s.t.Fatal("the lapsed holder renewed a hold")
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
					res, err := s.st.Acquire(ctx, s.request("k", token, 10*time.Second))
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
				if _, err := s.st.Release(ctx, driver.ReleaseRequest{Ref: s.ref("k", token)}); err != nil {
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

// A release with a tombstone of a token that holds nothing makes a later
// acquire with that token fail, and leaves the hold free for others.
func tombstoneRefusesLateAcquire(ctx context.Context, s *suite) {
	before := s.acquire(ctx, "k", "x", "", time.Second)
	s.release(ctx, "k", "x")
	if rel := s.releaseTombstone(ctx, "k", "late", 5*time.Second); rel.Held {
		s.t.Fatalf("release of a token that never held: %+v, want not held", rel)
	}
	if late := s.acquire(ctx, "k", "late", "", 10*time.Second); late.Acquired || late.Fence != 0 {
		s.t.Fatalf("acquire with a tombstoned token: %+v, want refused", late)
	}
	s.notHeld(ctx, "k", "late", "the tombstoned token")
	if next := s.acquire(ctx, "k", "next", "", time.Second); !next.Acquired || next.Fence <= before.Fence {
		s.t.Fatalf("acquire after a refused late acquire: %+v, want acquired with a fence above %d", next, before.Fence)
	}
}

// A release with a tombstone of a held token frees the hold for every
// token but that one.
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

// A release without a tombstone refuses nothing: the hold is free for
// other tokens and for the same one, whether or not the release found it.
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
		s.t.Fatalf("plain release of a token that never held: %+v, want not held", rel)
	}
	if res := s.acquire(ctx, "k", "never-held", "", time.Second); !res.Acquired {
		s.t.Fatalf("acquire after a plain release that found nothing: %+v, want acquired", res)
	}
}

// A new hold's fence is above the request's FenceFloor (the largest fence
// the Client has seen), and later fences stay above it without the floor:
// fences never go back, even when the store's own memory of the last
// fence is behind (a promoted replica). A floor below the store's own
// counter changes nothing.
func fenceFloorRespected(ctx context.Context, s *suite) {
	first := s.acquire(ctx, "k", "a", "", time.Second)
	s.release(ctx, "k", "a")
	floor := first.Fence + 1_000_000_000_000 // far ahead of any clock-based fence
	req := s.request("k", "b", time.Second)
	req.FenceFloor = floor
	res := s.acquireReq(ctx, req)
	if !res.Acquired || res.Fence <= floor {
		s.t.Fatalf("acquire with FenceFloor %d: %+v, want a fence above the floor", floor, res)
	}
	s.release(ctx, "k", "b")
	next := s.acquire(ctx, "k", "c", "", time.Second)
	if !next.Acquired || next.Fence <= res.Fence {
		s.t.Fatalf("acquire after a floored one: %+v, want a fence above %d", next, res.Fence)
	}
	s.release(ctx, "k", "c")
	low := s.request("k", "d", time.Second)
	low.FenceFloor = 1
	if got := s.acquireReq(ctx, low); !got.Acquired || got.Fence <= next.Fence {
		s.t.Fatalf("acquire with a low FenceFloor: %+v, want a fence above %d", got, next.Fence)
	}
}
