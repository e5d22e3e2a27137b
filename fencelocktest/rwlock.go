package fencelocktest

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
)

// The checks of fencelock.RWLockBackend. A backend without it has them
// skipped, with the reason.
func init() {
	checks = append(checks, []struct {
		name string
		run  func(ctx context.Context, s *suite)
	}{
		{"RWReadersShare", rwCheck(rwReadersShare)},
		{"RWWriterExclusive", rwCheck(rwWriterExclusive)},
		{"RWWriterPreference", rwCheck(rwWriterPreference)},
		{"RWIntentLapses", rwCheck(rwIntentLapses)},
		{"RWReadersTurnAfterWriter", rwCheck(rwReadersTurn)},
		{"RWAdmittedReaderLapses", rwCheck(rwAdmittedReaderLapses)},
		{"RWLapsedReaderFreesWriter", rwCheck(rwLapsedReaderFreesWriter)},
		{"RWLapsedWriterLetsReadersIn", rwCheck(rwLapsedWriterLetsReadersIn)},
		{"RWRetryIsIdempotent", rwCheck(rwRetryIsIdempotent)},
		{"RWRenew", rwCheck(rwRenew)},
		{"RWTombstone", rwCheck(rwTombstone)},
		{"RWReleaseNotification", rwCheck(rwNotification)},
		{"RWApartFromOthers", rwCheck(rwApartFromOthers)},
	}...)
}

// rwCheck runs check with the backend's RWLockBackend, or skips it.
func rwCheck(check func(ctx context.Context, s *suite, rb fencelock.RWLockBackend)) func(ctx context.Context, s *suite) {
	return capabilityCheck("Client.RWLock", check)
}

func rwOps(rb fencelock.RWLockBackend) holdCalls {
	return holdCalls{kind: "rw hold", release: rb.ReleaseRW, renew: rb.RenewRW, ttl: rb.RWTTL, watch: rb.WatchRW}
}

// rw makes one attempt for token, for a read or write hold, keeping a place
// for place when refused (none when 0).
func (s *suite) rw(ctx context.Context, rb fencelock.RWLockBackend, key, token string, write bool, ttl, place time.Duration) fencelock.AcquireResult {
	s.t.Helper()
	req := fencelock.RWRequest{Write: write, Place: place, Request: fencelock.AcquireRequest{
		Ref: s.ref(key, token), Owner: token, TTL: ttl}}
	res, err := rb.AcquireRW(ctx, req)
	if err != nil {
		s.t.Fatalf("AcquireRW(%s, token %s, write %v): %v", key, token, write, err)
	}
	return res
}

const (
	read  = false
	write = true
)

// Readers share the lock, each with a larger fence; a writer is refused
// while any reader holds it, told when the last reader's lease ends.
func rwReadersShare(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	var last int64
	for _, tok := range []string{"r1", "r2", "r3"} {
		res := s.rw(ctx, rb, "k", tok, read, 30*time.Second, 0)
		if !res.Acquired || res.Fence <= last {
			s.t.Fatalf("reader %s (fence before %d): %+v, want acquired with a larger fence", tok, last, res)
		}
		last = res.Fence
	}
	res := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 0)
	if res.Acquired || res.HolderTTL <= 0 {
		s.t.Fatalf("writer while readers hold the lock: %+v, want refused with the readers' lease", res)
	}
	for _, tok := range []string{"r1", "r2", "r3"} {
		s.holdRelease(ctx, rwOps(rb), "k", tok, 0)
	}
	if res := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 0); !res.Acquired || res.Fence <= last {
		s.t.Fatalf("writer after the readers left: %+v, want acquired with a fence above %d", res, last)
	}
}

// A writer excludes readers and other writers until it releases.
func rwWriterExclusive(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	w := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 0)
	if !w.Acquired {
		s.t.Fatalf("writer of a free lock: %+v", w)
	}
	if res := s.rw(ctx, rb, "k", "r", read, 30*time.Second, 0); res.Acquired || res.HolderTTL <= 0 {
		s.t.Fatalf("reader while a writer holds the lock: %+v, want refused with the writer's lease", res)
	}
	if res := s.rw(ctx, rb, "k", "w2", write, 30*time.Second, 0); res.Acquired {
		s.t.Fatalf("second writer: %+v, want refused", res)
	}
	if res := s.holdRelease(ctx, rwOps(rb), "k", "w", 0); !res.Held {
		s.t.Fatalf("writer's release: %+v", res)
	}
	if res := s.rw(ctx, rb, "k", "r", read, 30*time.Second, 0); !res.Acquired || res.Fence <= w.Fence {
		s.t.Fatalf("reader after the writer left: %+v, want acquired with a fence above %d", res, w.Fence)
	}
}

// A refused writer's intent keeps new readers out, not those holding; the
// writer gets the lock once they leave. A writer that withdraws its intent
// (a release by its token) lets readers in again.
func rwWriterPreference(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	ops := rwOps(rb)
	s.rw(ctx, rb, "k", "r1", read, 30*time.Second, 0)
	if res := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 30*time.Second); res.Acquired {
		s.t.Fatalf("writer while a reader holds the lock: %+v, want refused", res)
	}
	if res := s.rw(ctx, rb, "k", "r2", read, 30*time.Second, 0); res.Acquired || res.HolderTTL <= 0 {
		s.t.Fatalf("new reader while a writer waits: %+v, want refused with the intent's lease", res)
	}
	if res := s.holdRenew(ctx, ops, "k", "r1", 30*time.Second); !res.Held {
		s.t.Fatalf("the holding reader's renewal while a writer waits: %+v, want Held", res)
	}
	s.holdRelease(ctx, ops, "k", "r1", 0)
	w := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 30*time.Second)
	if !w.Acquired {
		s.t.Fatalf("the waiting writer after the last reader left: %+v, want acquired", w)
	}
	s.holdRelease(ctx, ops, "k", "w", 0)

	// Withdrawal: a writer that gives up.
	s.rw(ctx, rb, "k", "r3", read, 30*time.Second, 0)
	s.rw(ctx, rb, "k", "quitter", write, 30*time.Second, 30*time.Second)
	if res := s.rw(ctx, rb, "k", "r4", read, 30*time.Second, 0); res.Acquired {
		s.t.Fatalf("reader while a writer waits: %+v, want refused", res)
	}
	if res := s.holdRelease(ctx, ops, "k", "quitter", 0); res.Held {
		s.t.Fatalf("withdrawal of an intent: %+v, want Held false (it held nothing)", res)
	}
	if res := s.rw(ctx, rb, "k", "r4", read, 30*time.Second, 0); !res.Acquired {
		s.t.Fatalf("reader after the writer withdrew: %+v, want acquired", res)
	}
}

// An intent that is not renewed lapses, and readers get in again; a
// single attempt (intent 0) registers none.
func rwIntentLapses(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	s.rw(ctx, rb, "k", "r1", read, 30*time.Second, 0)
	s.rw(ctx, rb, "k", "try", write, 30*time.Second, 0)
	if res := s.rw(ctx, rb, "k", "r2", read, 30*time.Second, 0); !res.Acquired {
		s.t.Fatalf("reader after a single writer attempt: %+v, want acquired (no intent)", res)
	}
	s.rw(ctx, rb, "k", "w", write, 30*time.Second, 300*time.Millisecond)
	res := s.rw(ctx, rb, "k", "r3", read, 30*time.Second, 0)
	if res.Acquired || res.HolderTTL <= 0 || res.HolderTTL > s.leaseGiven(ctx, 300*time.Millisecond) {
		s.t.Fatalf("reader during a 300ms intent: %+v, want refused until the intent lapses", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		if res := s.rw(ctx, rb, "k", "r3", read, 30*time.Second, 0); res.Acquired {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("readers still refused 5s after a 300ms intent")
		}
	}
}

// A reader whose lease ended no longer keeps the writer out, and cannot be
// renewed.
func rwLapsedReaderFreesWriter(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	ops := rwOps(rb)
	s.rw(ctx, rb, "k", "r", read, 300*time.Millisecond, 0)
	if res := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 30*time.Second); res.Acquired || res.HolderTTL > s.leaseGiven(ctx, 300*time.Millisecond) {
		s.t.Fatalf("writer while a 300ms reader holds: %+v, want refused for at most 300ms", res)
	}
	s.waitHoldLapsed(ctx, ops, "k", "r", 5*time.Second)
	if res := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 30*time.Second); !res.Acquired {
		s.t.Fatalf("writer after the reader's lease ended: %+v, want acquired", res)
	}
	if res := s.holdRenew(ctx, ops, "k", "r", 30*time.Second); res.Held {
		s.t.Fatalf("renewal of the lapsed reader: %+v, want Held false", res)
	}
}

// A writer whose lease ended (its process was killed: nobody renews it or
// releases it) no longer keeps readers out, however many readers keep
// their places alive meanwhile: a waiting reader's next attempt, and a
// reader's single attempt, get in at once, and the writer's hold cannot be
// renewed.
func rwLapsedWriterLetsReadersIn(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	ops := rwOps(rb)
	w := s.rw(ctx, rb, "k", "w", write, 300*time.Millisecond, 0)
	if !w.Acquired {
		s.t.Fatalf("writer of a free lock: %+v", w)
	}
	// Readers wait with places that outlive the writer's lease, and keep
	// them alive, as waiting readers do while their attempts are refused.
	for _, tok := range []string{"waiting", "other"} {
		if res := s.rw(ctx, rb, "k", tok, read, 30*time.Second, 30*time.Second); res.Acquired {
			s.t.Fatalf("reader %s while the writer holds: %+v, want refused", tok, res)
		}
	}
	s.waitHoldLapsed(ctx, ops, "k", "w", 5*time.Second)
	if res := s.rw(ctx, rb, "k", "poller", read, 30*time.Second, 0); !res.Acquired || res.Fence <= w.Fence {
		s.t.Fatalf("a reader's single attempt after the writer's lease ended: %+v, want acquired with a fence above %d", res, w.Fence)
	}
	for _, tok := range []string{"waiting", "other"} {
		if res := s.rw(ctx, rb, "k", tok, read, 30*time.Second, 30*time.Second); !res.Acquired || res.Fence <= w.Fence {
			s.t.Fatalf("waiting reader %s after the writer's lease ended: %+v, want acquired with a fence above %d", tok, res, w.Fence)
		}
	}
	if res := s.holdRenew(ctx, ops, "k", "w", 30*time.Second); res.Held {
		s.t.Fatalf("renewal of the lapsed writer: %+v, want Held false", res)
	}
}

// A retry by a holding token keeps its fence and restarts its lease, even
// while a writer waits.
func rwRetryIsIdempotent(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	first := s.rw(ctx, rb, "k", "r", read, 2*time.Second, 0)
	s.rw(ctx, rb, "k", "w", write, 30*time.Second, 30*time.Second)
	again := s.rw(ctx, rb, "k", "r", read, 30*time.Second, 0)
	if !again.Acquired || again.Fence != first.Fence {
		s.t.Fatalf("reader's retry while a writer waits: %+v, want acquired with fence %d", again, first.Fence)
	}
	if ttl := s.holdTTL(ctx, rwOps(rb), "k", "r"); ttl <= 2*time.Second {
		s.t.Fatalf("lease after a retry with ttl 30s: %v, want it restarted", ttl)
	}
}

func rwRenew(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	s.checkHoldRenew(ctx, rwOps(rb), func(key, token string, ttl time.Duration) fencelock.AcquireResult {
		return s.rw(ctx, rb, key, token, read, ttl, 0)
	})
}

// A tombstoned token is refused, and its intent does not stay.
func rwTombstone(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	ops := rwOps(rb)
	s.holdRelease(ctx, ops, "k", "late", time.Minute)
	if res := s.rw(ctx, rb, "k", "late", write, 30*time.Second, 30*time.Second); res.Acquired {
		s.t.Fatalf("writer with a tombstoned token: %+v, want refused", res)
	}
	if res := s.rw(ctx, rb, "k", "r", read, 30*time.Second, 0); !res.Acquired {
		s.t.Fatalf("reader after a tombstoned writer's attempt: %+v, want acquired (no intent)", res)
	}
}

// The last reader's release wakes a waiting writer; the writer's release
// wakes waiting readers.
func rwNotification(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	ops := rwOps(rb)
	s.rw(ctx, rb, "k", "r", read, 30*time.Second, 0)
	s.checkHoldNotified(ctx, ops, "k", "r", func() {
		if res := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 0); res.Acquired {
			s.t.Fatalf("writer while a reader holds: %+v, want refused", res)
		}
	})
	s.rw(ctx, rb, "k", "w", write, 30*time.Second, 0)
	s.checkHoldNotified(ctx, ops, "k", "w", func() {
		if res := s.rw(ctx, rb, "k", "r2", read, 30*time.Second, 0); res.Acquired {
			s.t.Fatalf("reader while a writer holds: %+v, want refused", res)
		}
	})
}

// A read-write lock, the plain lock and the semaphore of one name do not
// block each other.
func rwApartFromOthers(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	if res := s.acquire(ctx, "k", "lock", "", 30*time.Second); !res.Acquired {
		s.t.Fatalf("lock: %+v", res)
	}
	if sb, ok := s.b.(fencelock.SemaphoreBackend); ok {
		if res := s.permit(ctx, sb, "k", "permit", 1, 30*time.Second); !res.Acquired {
			s.t.Fatalf("permit: %+v", res)
		}
	}
	if res := s.rw(ctx, rb, "k", "w", write, 30*time.Second, 0); !res.Acquired {
		s.t.Fatalf("writer while the lock and a permit of the same name are held: %+v, want acquired", res)
	}
}

// The writer's release lets the readers that waited (with a place) in
// before the next writer, although that writer's intent is live; readers
// that come later wait for that writer.
func rwReadersTurn(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	const ttl, place = 30 * time.Second, 30 * time.Second
	w1 := s.rw(ctx, rb, "k", "w1", write, ttl, place)
	if !w1.Acquired {
		s.t.Fatalf("first writer: %+v", w1)
	}
	for _, tok := range []string{"r1", "r2"} {
		if res := s.rw(ctx, rb, "k", tok, read, ttl, place); res.Acquired {
			s.t.Fatalf("reader %s while a writer holds: %+v, want refused", tok, res)
		}
	}
	if res := s.rw(ctx, rb, "k", "w2", write, ttl, place); res.Acquired {
		s.t.Fatalf("second writer while the first holds: %+v, want refused", res)
	}
	s.holdRelease(ctx, rwOps(rb), "k", "w1", 0)
	if res := s.rw(ctx, rb, "k", "w2", write, ttl, place); res.Acquired || res.HolderTTL <= 0 {
		s.t.Fatalf("second writer before the readers admitted by the first's release came: %+v, want refused", res)
	}
	if res := s.rw(ctx, rb, "k", "late", read, ttl, place); res.Acquired {
		s.t.Fatalf("a reader that did not wait, while a writer waits: %+v, want refused", res)
	}
	for _, tok := range []string{"r1", "r2"} {
		if res := s.rw(ctx, rb, "k", tok, read, ttl, place); !res.Acquired || res.Fence <= w1.Fence {
			s.t.Fatalf("admitted reader %s despite the waiting writer: %+v, want acquired with a fence above %d", tok, res, w1.Fence)
		}
	}
	s.holdRelease(ctx, rwOps(rb), "k", "r1", 0)
	s.holdRelease(ctx, rwOps(rb), "k", "r2", 0)
	if res := s.rw(ctx, rb, "k", "w2", write, ttl, place); !res.Acquired {
		s.t.Fatalf("second writer after the admitted readers left: %+v, want acquired", res)
	}
}

// A reader admitted by a writer's release that never comes holds the next
// writer up until its place lapses, no longer; one that gives up (a
// release by its token) at once.
func rwAdmittedReaderLapses(ctx context.Context, s *suite, rb fencelock.RWLockBackend) {
	const ttl = 30 * time.Second
	s.rw(ctx, rb, "k", "w1", write, ttl, ttl)
	s.rw(ctx, rb, "k", "gone", read, ttl, 300*time.Millisecond)
	s.rw(ctx, rb, "k", "quitter", read, ttl, ttl)
	s.holdRelease(ctx, rwOps(rb), "k", "w1", 0)
	if res := s.holdRelease(ctx, rwOps(rb), "k", "quitter", 0); res.Held {
		s.t.Fatalf("an admitted reader's withdrawal: %+v, want Held false (it held nothing)", res)
	}
	res := s.rw(ctx, rb, "k", "w2", write, ttl, ttl)
	if res.Acquired || res.HolderTTL <= 0 || res.HolderTTL > s.leaseGiven(ctx, 300*time.Millisecond) {
		s.t.Fatalf("writer while an admitted reader's 300ms place runs: %+v, want refused for at most 300ms", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		if res := s.rw(ctx, rb, "k", "w2", write, ttl, ttl); res.Acquired {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("writer still refused 5s after the admitted reader's 300ms place")
		}
	}
}

// leaseGiven is the lease the backend gives a request of d: d, or more for
// a backend that rounds leases up (etcd: whole seconds, with a minimum),
// as the Validity of a plain lock of d reports. Places are leases of the
// same kind, so a refusal may report up to that much.
func (s *suite) leaseGiven(ctx context.Context, d time.Duration) time.Duration {
	s.t.Helper()
	probe := fmt.Sprintf("lease-probe-%v", d)
	res := s.acquire(ctx, probe, probe, "", d)
	s.release(ctx, probe, probe)
	return max(d, res.Validity)
}
