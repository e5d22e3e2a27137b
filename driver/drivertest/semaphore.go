package drivertest

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The checks of the semaphore (KindSemaphore) beyond the core ones: the
// number of permits.
func init() {
	checks = append(checks, []check{
		{"SemaphorePermitsBounded", semPermitsBounded, supports(driver.KindSemaphore)},
		{"SemaphoreOwnLimit", semOwnLimit, supports(driver.KindSemaphore)},
		{"SemaphoreRetryTakesNoPermit", semRetryTakesNoPermit, supports(driver.KindSemaphore)},
		{"SemaphoreBadPermits", semBadPermits, supports(driver.KindSemaphore)},
		{"SemaphoreReleaseNotification", semNotification, all(supports(driver.KindSemaphore), has[driver.Notifier])},
	}...)
}

// permit makes one attempt for token to take one of permits permits.
func (s *suite) permit(ctx context.Context, key, token string, permits int, ttl time.Duration) driver.Result {
	s.t.Helper()
	return s.permitFloor(ctx, key, token, permits, ttl, 0)
}

func (s *suite) permitFloor(ctx context.Context, key, token string, permits int, ttl time.Duration, floor int64) driver.Result {
	s.t.Helper()
	p := s.as(driver.KindSemaphore)
	req := p.request(key, token, ttl)
	req.Permits, req.FenceFloor = permits, floor
	return p.acquireReq(ctx, req)
}

// N permits go to N tokens, each with a fence above the one before; the
// next token is refused and told when the earliest permit's lease ends.
func semPermitsBounded(ctx context.Context, s *suite) {
	var last int64
	for _, tok := range []string{"a", "b", "c"} {
		res := s.permit(ctx, "k", tok, 3, 30*time.Second)
		if !res.Acquired || res.Fence <= last || res.Holds != 1 {
			s.t.Fatalf("permit for %s of 3 (fence before %d): %+v, want acquired with a larger fence and Holds 1", tok, last, res)
		}
		last = res.Fence
	}
	res := s.permit(ctx, "k", "d", 3, 30*time.Second)
	if res.Acquired || res.Fence != 0 {
		s.t.Fatalf("a fourth permit of 3: %+v, want refused", res)
	}
	if res.HolderTTL <= 0 || res.HolderTTL > 30*time.Second {
		s.t.Fatalf("refused permit's HolderTTL = %v, want the earliest permit's remaining lease (0, 30s]", res.HolderTTL)
	}
}

// Each request is checked against its own number of permits.
func semOwnLimit(ctx context.Context, s *suite) {
	for _, tok := range []string{"a", "b"} {
		if res := s.permit(ctx, "k", tok, 3, 30*time.Second); !res.Acquired {
			s.t.Fatalf("permit for %s of 3: %+v, want acquired", tok, res)
		}
	}
	if res := s.permit(ctx, "k", "small", 2, 30*time.Second); res.Acquired {
		s.t.Fatalf("a permit of 2 while 2 are held: %+v, want refused", res)
	}
	if res := s.permit(ctx, "k", "large", 3, 30*time.Second); !res.Acquired {
		s.t.Fatalf("a permit of 3 while 2 are held: %+v, want acquired", res)
	}
}

// An acquire by a token that holds a permit restarts its lease with the
// same fence, and takes no second permit.
func semRetryTakesNoPermit(ctx context.Context, s *suite) {
	first := s.permit(ctx, "k", "a", 2, 2*time.Second)
	again := s.permit(ctx, "k", "a", 2, 30*time.Second)
	if !again.Acquired || again.Fence != first.Fence {
		s.t.Fatalf("retry with the same token: %+v, want acquired with fence %d", again, first.Fence)
	}
	if ttl := s.as(driver.KindSemaphore).ttlOf(ctx, "k", "a"); ttl <= 2*time.Second {
		s.t.Fatalf("lease after a retry with ttl 30s: %v, want it restarted", ttl)
	}
	if res := s.permit(ctx, "k", "b", 2, 30*time.Second); !res.Acquired {
		s.t.Fatalf("second token with one permit held twice by the first: %+v, want acquired (a retry takes no permit)", res)
	}
}

// Fewer than one permit is an invalid argument, not a hang or a panic.
func semBadPermits(ctx context.Context, s *suite) {
	for _, n := range []int{0, -1} {
		req := s.as(driver.KindSemaphore).request("k", "a", time.Second)
		req.Permits = n
		if _, err := s.st.Acquire(ctx, req); !errors.Is(err, driver.ErrInvalidArgument) {
			s.t.Fatalf("Acquire of a permit of %d: %v, want an error matching ErrInvalidArgument", n, err)
		}
	}
}

// A watcher hears of a release after an acquire was refused.
func semNotification(ctx context.Context, s *suite) {
	s.permit(ctx, "k", "a", 1, 30*time.Second)
	s.as(driver.KindSemaphore).checkNotified(ctx, "k", "a", func() {
		if res := s.permit(ctx, "k", "b", 1, 30*time.Second); res.Acquired {
			s.t.Fatalf("permit of 1 while held: %+v, want refused", res)
		}
	})
}
