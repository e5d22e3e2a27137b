package drivertest

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// coreChecks hold for every kind of hold.
var coreChecks = []struct {
	name string
	run  func(ctx context.Context, s *suite, k driver.Kind)
}{
	{"AcquireFree", acquireFree},
	{"HeldRefused", heldRefused},
	{"FencesStrictlyIncrease", fencesStrictlyIncrease},
	{"RetryIsIdempotent", retryIsIdempotent},
	{"OtherTokenChangesNothing", otherTokenChangesNothing},
	{"RenewExtends", renewExtends},
	{"RenewNeverRecreates", renewNeverRecreates},
	{"ExpiryFrees", expiryFrees},
	{"TombstoneRefuses", tombstoneRefuses},
	{"FenceFloorRespected", fenceFloorRespected},
}

func acquireFree(ctx context.Context, s *suite, k driver.Kind) {
	res := s.acquire(ctx, k, "k", "a", 10*time.Second)
	if !res.Acquired || res.Fence <= 0 {
		s.t.Fatalf("acquire of a free %v: %+v, want acquired with a positive fence", k, res)
	}
	if d := s.ttl(ctx, k, "k", "a"); d > 10*time.Second {
		s.t.Fatalf("TTL after acquiring with 10s: %v", d)
	}
}

func heldRefused(ctx context.Context, s *suite, k driver.Kind) {
	s.acquire(ctx, k, "k", "a", 10*time.Second)
	res := s.acquire(ctx, k, "k", "b", 10*time.Second)
	if exclusive(k) && res.Acquired {
		s.t.Fatalf("a second %v holder was let in: %+v", k, res)
	}
	if !exclusive(k) && !res.Acquired {
		s.t.Fatalf("a second reader was refused: %+v", res)
	}
}

func fencesStrictlyIncrease(ctx context.Context, s *suite, k driver.Kind) {
	var last int64
	for i, tok := range []string{"a", "b", "c"} {
		res := s.acquire(ctx, k, "k", tok, 10*time.Second)
		if !res.Acquired || res.Fence <= last {
			s.t.Fatalf("acquisition %d: %+v, want acquired with a fence above %d", i, res, last)
		}
		last = res.Fence
		if rel := s.release(ctx, k, "k", tok, 0); !rel.Held {
			s.t.Fatalf("release %d: %+v, want held", i, rel)
		}
	}
}

func retryIsIdempotent(ctx context.Context, s *suite, k driver.Kind) {
	first := s.acquire(ctx, k, "k", "a", 10*time.Second)
	again := s.acquire(ctx, k, "k", "a", 10*time.Second)
	if !again.Acquired || again.Fence != first.Fence {
		s.t.Fatalf("retry: %+v after %+v, want the same fence", again, first)
	}
	if rel := s.release(ctx, k, "k", "a", 0); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release after a retry: %+v, want held with none remaining", rel)
	}
	if res := s.acquire(ctx, k, "k", "b", 10*time.Second); !res.Acquired {
		s.t.Fatalf("after the one release: %+v, want free", res)
	}
}

func otherTokenChangesNothing(ctx context.Context, s *suite, k driver.Kind) {
	s.acquire(ctx, k, "k", "a", 10*time.Second)
	if rel := s.release(ctx, k, "k", "z", 0); rel.Held {
		s.t.Fatalf("release by another token: %+v, want not held", rel)
	}
	if r := s.renew(ctx, k, "k", "z", 10*time.Second); r.Held {
		s.t.Fatalf("renew by another token: %+v, want not held", r)
	}
	if s.ttl(ctx, k, "k", "a") == 0 {
		s.t.Fatal("the holder lost its hold to another token's release")
	}
}

func renewExtends(ctx context.Context, s *suite, k driver.Kind) {
	s.acquire(ctx, k, "k", "a", time.Second)
	if r := s.renew(ctx, k, "k", "a", 20*time.Second); !r.Held {
		s.t.Fatalf("renew: %+v, want held", r)
	}
	if d := s.ttl(ctx, k, "k", "a"); d <= 10*time.Second {
		s.t.Fatalf("TTL after renewing to 20s: %v", d)
	}
}

func renewNeverRecreates(ctx context.Context, s *suite, k driver.Kind) {
	s.acquire(ctx, k, "k", "a", 10*time.Second)
	s.release(ctx, k, "k", "a", 0)
	if r := s.renew(ctx, k, "k", "a", 10*time.Second); r.Held {
		s.t.Fatalf("renew of a released hold: %+v, want not held", r)
	}
	if d := s.ttl(ctx, k, "k", "a"); d != 0 {
		s.t.Fatalf("a renewal re-created the hold: TTL %v", d)
	}
}

func expiryFrees(ctx context.Context, s *suite, k driver.Kind) {
	s.acquire(ctx, k, "k", "a", 200*time.Millisecond)
	s.waitLapsed(ctx, k, "k", "a", 5*time.Second)
	if res := s.acquire(ctx, k, "k", "b", 10*time.Second); !res.Acquired {
		s.t.Fatalf("after the holder's lease ended: %+v, want acquired", res)
	}
	if r := s.renew(ctx, k, "k", "a", 10*time.Second); r.Held {
		s.t.Fatalf("renew of a lapsed hold: %+v, want not held", r)
	}
}

func tombstoneRefuses(ctx context.Context, s *suite, k driver.Kind) {
	if rel := s.release(ctx, k, "k", "late", 10*time.Second); rel.Held {
		s.t.Fatalf("release of a token that holds nothing: %+v", rel)
	}
	if res := s.acquire(ctx, k, "k", "late", 10*time.Second); res.Acquired {
		s.t.Fatalf("an acquire after its token's tombstone: %+v, want refused", res)
	}
	if res := s.acquire(ctx, k, "k", "b", 10*time.Second); !res.Acquired {
		s.t.Fatalf("another token after a tombstone: %+v, want acquired", res)
	}
}

func fenceFloorRespected(ctx context.Context, s *suite, k driver.Kind) {
	req := s.request(k, "k", "a", 10*time.Second)
	req.FenceFloor = 1 << 40
	if res := s.acquireReq(ctx, req); !res.Acquired || res.Fence <= req.FenceFloor {
		s.t.Fatalf("acquire with FenceFloor %d: %+v", req.FenceFloor, res)
	}
}
