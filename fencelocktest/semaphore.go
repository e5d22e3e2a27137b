package fencelocktest

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock"
)

// The checks of fencelock.SemaphoreBackend. A backend without it has them
// skipped, with the reason.
func init() {
	checks = append(checks, []struct {
		name string
		run  func(ctx context.Context, s *suite)
	}{
		{"SemaphorePermitsBounded", semCheck(semPermitsBounded)},
		{"SemaphoreOwnLimit", semCheck(semOwnLimit)},
		{"SemaphoreRetryIsIdempotent", semCheck(semRetryIsIdempotent)},
		{"SemaphoreReleaseFreesPermit", semCheck(semReleaseFreesPermit)},
		{"SemaphoreExpiryReclaimsPermit", semCheck(semExpiryReclaims)},
		{"SemaphoreRenew", semCheck(semRenew)},
		{"SemaphoreTombstone", semCheck(semTombstone)},
		{"SemaphoreFenceFloor", semCheck(semFenceFloor)},
		{"SemaphoreReleaseNotification", semCheck(semNotification)},
		{"SemaphoreApartFromLock", semCheck(semApartFromLock)},
		{"SemaphoreBadPermits", semCheck(semBadPermits)},
	}...)
}

// semCheck runs check with the backend's SemaphoreBackend, or skips it.
func semCheck(check func(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend)) func(ctx context.Context, s *suite) {
	return capabilityCheck("Client.Semaphore", check)
}

// semOps adapts a SemaphoreBackend to the checks shared with read-write
// locks (holds.go).
func semOps(sb fencelock.SemaphoreBackend) holdCalls {
	return holdCalls{
		kind:    "permit",
		release: sb.ReleasePermit,
		renew:   sb.RenewPermits,
		ttl:     sb.PermitTTL,
		watch:   sb.WatchPermits,
	}
}

// permit makes one attempt for token to take one of permits permits.
func (s *suite) permit(ctx context.Context, sb fencelock.SemaphoreBackend, key, token string, permits int, ttl time.Duration) fencelock.AcquireResult {
	s.t.Helper()
	return s.permitFloor(ctx, sb, key, token, permits, ttl, 0)
}

func (s *suite) permitFloor(ctx context.Context, sb fencelock.SemaphoreBackend, key, token string, permits int, ttl time.Duration, floor int64) fencelock.AcquireResult {
	s.t.Helper()
	req := fencelock.PermitRequest{Permits: permits, Request: fencelock.AcquireRequest{
		Ref: s.ref(key, token), Owner: token, TTL: ttl, FenceFloor: floor}}
	res, err := sb.AcquirePermit(ctx, req)
	if err != nil {
		s.t.Fatalf("AcquirePermit(%s, token %s, %d permits): %v", key, token, permits, err)
	}
	return res
}

// N permits go to N tokens, each with a fence above the one before; the
// next token is refused and told when the earliest permit's lease ends.
func semPermitsBounded(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	var last int64
	for _, tok := range []string{"a", "b", "c"} {
		res := s.permit(ctx, sb, "k", tok, 3, 30*time.Second)
		if !res.Acquired || res.Fence <= last || res.Holds != 1 {
			s.t.Fatalf("permit for %s of 3 (fence before %d): %+v, want acquired with a larger fence and Holds 1", tok, last, res)
		}
		last = res.Fence
	}
	res := s.permit(ctx, sb, "k", "d", 3, 30*time.Second)
	if res.Acquired || res.Fence != 0 {
		s.t.Fatalf("a fourth permit of 3: %+v, want refused", res)
	}
	if res.HolderTTL <= 0 || res.HolderTTL > 30*time.Second {
		s.t.Fatalf("refused permit's HolderTTL = %v, want the earliest permit's remaining lease (0, 30s]", res.HolderTTL)
	}
}

// Each request is checked against its own number of permits.
func semOwnLimit(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	for _, tok := range []string{"a", "b"} {
		if res := s.permit(ctx, sb, "k", tok, 3, 30*time.Second); !res.Acquired {
			s.t.Fatalf("permit for %s of 3: %+v, want acquired", tok, res)
		}
	}
	if res := s.permit(ctx, sb, "k", "small", 2, 30*time.Second); res.Acquired {
		s.t.Fatalf("a permit of 2 while 2 are held: %+v, want refused", res)
	}
	if res := s.permit(ctx, sb, "k", "large", 3, 30*time.Second); !res.Acquired {
		s.t.Fatalf("a permit of 3 while 2 are held: %+v, want acquired", res)
	}
}

// An acquire by a token that holds a permit restarts its lease with the
// same fence, and takes no second permit.
func semRetryIsIdempotent(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	first := s.permit(ctx, sb, "k", "a", 2, 2*time.Second)
	again := s.permit(ctx, sb, "k", "a", 2, 30*time.Second)
	if !again.Acquired || again.Fence != first.Fence {
		s.t.Fatalf("retry with the same token: %+v, want acquired with fence %d", again, first.Fence)
	}
	if ttl := s.holdTTL(ctx, semOps(sb), "k", "a"); ttl <= 2*time.Second {
		s.t.Fatalf("lease after a retry with ttl 30s: %v, want it restarted", ttl)
	}
	if res := s.permit(ctx, sb, "k", "b", 2, 30*time.Second); !res.Acquired {
		s.t.Fatalf("second token with one permit held twice by the first: %+v, want acquired (a retry takes no permit)", res)
	}
}

// A release frees the permit for another token, once; a release by a
// token that holds nothing changes nothing.
func semReleaseFreesPermit(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	ops := semOps(sb)
	s.permit(ctx, sb, "k", "a", 1, 30*time.Second)
	if res := s.holdRelease(ctx, ops, "k", "other", 0); res.Held {
		s.t.Fatalf("release by a token without a permit: %+v, want Held false", res)
	}
	if res := s.permit(ctx, sb, "k", "b", 1, 30*time.Second); res.Acquired {
		s.t.Fatalf("permit of 1 while held: %+v, want refused", res)
	}
	if res := s.holdRelease(ctx, ops, "k", "a", 0); !res.Held || res.Remaining != 0 {
		s.t.Fatalf("release of a live permit: %+v, want Held true, Remaining 0", res)
	}
	if res := s.holdRelease(ctx, ops, "k", "a", 0); res.Held {
		s.t.Fatalf("second release: %+v, want Held false", res)
	}
	if res := s.permit(ctx, sb, "k", "b", 1, 30*time.Second); !res.Acquired {
		s.t.Fatalf("permit after the release: %+v, want acquired", res)
	}
}

// A permit whose lease ended is gone without anyone releasing it: its
// renewal and TTL report it, and another token takes it.
func semExpiryReclaims(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	ops := semOps(sb)
	s.permit(ctx, sb, "k", "a", 1, 300*time.Millisecond)
	s.waitHoldLapsed(ctx, ops, "k", "a", 5*time.Second)
	if res := s.permit(ctx, sb, "k", "b", 1, 30*time.Second); !res.Acquired {
		s.t.Fatalf("permit after the holder's lease ended: %+v, want acquired", res)
	}
	if res := s.holdRenew(ctx, ops, "k", "a", 30*time.Second); res.Held {
		s.t.Fatalf("renewal of a lapsed permit: %+v, want Held false (never re-created)", res)
	}
	if res := s.permit(ctx, sb, "k", "c", 1, 30*time.Second); res.Acquired {
		s.t.Fatalf("a renewal re-created the lapsed permit's place or the semaphore let two in: %+v", res)
	}
}

// Renewal extends the permit's lease; it never renews another token.
func semRenew(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	s.checkHoldRenew(ctx, semOps(sb), func(key, token string, ttl time.Duration) fencelock.AcquireResult {
		return s.permit(ctx, sb, key, token, 5, ttl)
	})
}

// A release with a tombstone refuses a later acquire by the same token.
func semTombstone(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	ops := semOps(sb)
	s.holdRelease(ctx, ops, "k", "late", time.Minute)
	if res := s.permit(ctx, sb, "k", "late", 5, 30*time.Second); res.Acquired {
		s.t.Fatalf("acquire of a tombstoned token: %+v, want refused", res)
	}
	if res := s.permit(ctx, sb, "k", "other", 5, 30*time.Second); !res.Acquired {
		s.t.Fatalf("acquire by another token: %+v, want acquired", res)
	}
}

// A new permit's fence is above the request's floor, and later ones above it.
func semFenceFloor(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	first := s.permit(ctx, sb, "k", "first", 5, 30*time.Second)
	floor := first.Fence + 1_000_000_000_000 // far ahead of any clock-based fence
	res := s.permitFloor(ctx, sb, "k", "a", 5, 30*time.Second, floor)
	if !res.Acquired || res.Fence <= floor {
		s.t.Fatalf("permit with floor %d: %+v, want a fence above it", floor, res)
	}
	next := s.permit(ctx, sb, "k", "b", 5, 30*time.Second)
	if !next.Acquired || next.Fence <= res.Fence {
		s.t.Fatalf("next permit: %+v, want a fence above %d", next, res.Fence)
	}
}

// A watcher hears of a release after an acquire was refused.
func semNotification(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	s.permit(ctx, sb, "k", "a", 1, 30*time.Second)
	s.checkHoldNotified(ctx, semOps(sb), "k", "a", func() {
		if res := s.permit(ctx, sb, "k", "b", 1, 30*time.Second); res.Acquired {
			s.t.Fatalf("permit of 1 while held: %+v, want refused", res)
		}
	})
}

// A semaphore and the plain lock of the same name do not block each other.
func semApartFromLock(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	if res := s.acquire(ctx, "k", "lock", "", 30*time.Second); !res.Acquired {
		s.t.Fatalf("lock: %+v", res)
	}
	if res := s.permit(ctx, sb, "k", "p", 1, 30*time.Second); !res.Acquired {
		s.t.Fatalf("permit of 1 while the lock of the same name is held: %+v, want acquired", res)
	}
	if res := s.holdRelease(ctx, semOps(sb), "k", "lock", 0); res.Held {
		s.t.Fatalf("permit release with the lock's token: %+v, want Held false", res)
	}
}

// Fewer than one permit is an invalid argument, not a hang or a panic.
func semBadPermits(ctx context.Context, s *suite, sb fencelock.SemaphoreBackend) {
	for _, n := range []int{0, -1} {
		_, err := sb.AcquirePermit(ctx, fencelock.PermitRequest{Permits: n, Request: fencelock.AcquireRequest{
			Ref: s.ref("k", "a"), Owner: "a", TTL: time.Second}})
		if !errors.Is(err, fencelock.ErrInvalidArgument) {
			s.t.Fatalf("AcquirePermit with %d permits: %v, want an error matching ErrInvalidArgument", n, err)
		}
	}
}
