package fencelocktest

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock"
)

// holdCalls are the calls that act on a hold of a semaphore or read-write
// lock once taken, for the checks the two share.
type holdCalls struct {
	kind    string // "permit" or "rw hold", for messages
	release func(ctx context.Context, req fencelock.ReleaseRequest) (fencelock.ReleaseResult, error)
	renew   func(ctx context.Context, reqs []fencelock.RenewRequest) ([]fencelock.RenewResult, error)
	ttl     func(ctx context.Context, ref fencelock.LockRef) (time.Duration, error)
	watch   func(ctx context.Context, namespace, key string) (*fencelock.Watch, error)
}

func (s *suite) holdRelease(ctx context.Context, c holdCalls, key, token string, tombstone time.Duration) fencelock.ReleaseResult {
	s.t.Helper()
	res, err := c.release(ctx, fencelock.ReleaseRequest{Ref: s.ref(key, token), Tombstone: tombstone})
	if err != nil {
		s.t.Fatalf("release of %s %s/%s: %v", c.kind, key, token, err)
	}
	return res
}

func (s *suite) holdRenew(ctx context.Context, c holdCalls, key, token string, ttl time.Duration) fencelock.RenewResult {
	s.t.Helper()
	res, err := c.renew(ctx, []fencelock.RenewRequest{{Ref: s.ref(key, token), TTL: ttl}})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		s.t.Fatalf("renewal of %s %s/%s: %v %v", c.kind, key, token, res, err)
	}
	return res[0]
}

// holdTTL returns the hold's remaining lease, or 0 when it has none.
func (s *suite) holdTTL(ctx context.Context, c holdCalls, key, token string) time.Duration {
	s.t.Helper()
	ttl, err := c.ttl(ctx, s.ref(key, token))
	if errors.Is(err, fencelock.ErrNotHeld) {
		return 0
	}
	if err != nil {
		s.t.Fatalf("TTL of %s %s/%s: %v", c.kind, key, token, err)
	}
	return ttl
}

// waitHoldLapsed waits until token's hold has no lease left, failing the
// check if that takes more than limit.
func (s *suite) waitHoldLapsed(ctx context.Context, c holdCalls, key, token string, limit time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ttl := s.holdTTL(ctx, c, key, token)
		if ttl == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the %s of token %s still had a lease of %v after %v", c.kind, token, ttl, limit)
		}
		time.Sleep(min(ttl, 100*time.Millisecond))
	}
}

// checkHoldRenew checks that renewal extends a hold's lease, and renews
// nothing for a token without one. take acquires a hold.
func (s *suite) checkHoldRenew(ctx context.Context, c holdCalls, take func(key, token string, ttl time.Duration) fencelock.AcquireResult) {
	if res := take("k", "a", 2*time.Second); !res.Acquired {
		s.t.Fatalf("take: %+v", res)
	}
	if res := s.holdRenew(ctx, c, "k", "a", 30*time.Second); !res.Held {
		s.t.Fatalf("renewal of a live %s: %+v, want Held", c.kind, res)
	}
	if ttl := s.holdTTL(ctx, c, "k", "a"); ttl <= 2*time.Second || ttl > 30*time.Second {
		s.t.Fatalf("lease after renewing with 30s: %v, want (2s, 30s]", ttl)
	}
	if res := s.holdRenew(ctx, c, "k", "nobody", 30*time.Second); res.Held {
		s.t.Fatalf("renewal by a token without a %s: %+v, want Held false", c.kind, res)
	}
	// A batch: one result per request, in order.
	if res := take("k", "b", 2*time.Second); !res.Acquired {
		s.t.Fatalf("take: %+v", res)
	}
	batch, err := c.renew(ctx, []fencelock.RenewRequest{
		{Ref: s.ref("k", "a"), TTL: 30 * time.Second},
		{Ref: s.ref("k", "nobody"), TTL: 30 * time.Second},
		{Ref: s.ref("k", "b"), TTL: 30 * time.Second},
	})
	if err != nil || len(batch) != 3 || !batch[0].Held || batch[1].Held || !batch[2].Held {
		s.t.Fatalf("renewal batch [a, nobody, b]: %+v %v, want held, not held, held", batch, err)
	}
	if ttl := s.holdTTL(ctx, c, "k", "nobody"); ttl != 0 {
		s.t.Fatalf("TTL of a token without a %s: %v, want ErrNotHeld", c.kind, ttl)
	}
}

// checkHoldNotified watches key, runs refuse (an acquire that must be
// refused), releases holder's hold and expects a notification.
func (s *suite) checkHoldNotified(ctx context.Context, c holdCalls, key, holder string, refuse func()) {
	w, err := c.watch(ctx, s.ns, key)
	switch {
	case errors.Is(err, fencelock.ErrUnsupported):
		s.t.Skipf("the backend offers no notifications for %ss: %v", c.kind, err)
	case err != nil: // a notifier that fails must not pass as one that is absent
		s.t.Fatalf("watching %ss of %s: %v", c.kind, key, err)
	}
	defer w.Stop()
	refuse()
	if res := s.holdRelease(ctx, c, key, holder, 0); !res.Held {
		s.t.Fatalf("release: %+v", res)
	}
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no notification within 10s of a release that a refused acquire waited for")
	}
}
