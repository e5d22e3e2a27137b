package drivertest

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The checks of the read-write lock (KindRead, KindWrite) beyond the core
// ones: readers and writers together, intents and places.
func init() {
	rw := supports(driver.KindRead, driver.KindWrite)
	checks = append(checks, []check{
		{"RWReadersShare", rwReadersShare, rw},
		{"RWWriterExclusive", rwWriterExclusive, rw},
		{"RWWriterPreference", rwWriterPreference, rw},
		{"RWIntentLapses", rwIntentLapses, rw},
		{"RWReadersTurnAfterWriter", rwReadersTurn, rw},
		{"RWAdmittedReaderLapses", rwAdmittedReaderLapses, rw},
		{"RWLapsedReaderFreesWriter", rwLapsedReaderFreesWriter, rw},
		{"RWLapsedWriterLetsReadersIn", rwLapsedWriterLetsReadersIn, rw},
		{"RWRetryIsIdempotent", rwRetryIsIdempotent, rw},
		{"RWTombstone", rwTombstone, rw},
		{"RWReleaseNotification", rwNotification, all(rw, has[driver.Notifier])},
		{"RWApartFromOthers", rwApartFromOthers, rw},
	}...)
}

// rw makes one attempt for token, for a read or write hold, keeping a place
// for place when refused (none when 0).
func (s *suite) rw(ctx context.Context, key, token string, write bool, ttl, place time.Duration) driver.Result {
	s.t.Helper()
	k := driver.KindRead
	if write {
		k = driver.KindWrite
	}
	h := s.as(k)
	req := h.request(key, token, ttl)
	req.Place = place
	return h.acquireReq(ctx, req)
}

const (
	read  = false
	write = true
)

// Readers share the lock, each with a larger fence; a writer is refused
// while any reader holds it, told when the last reader's lease ends.
func rwReadersShare(ctx context.Context, s *suite) {
	var last int64
	for _, tok := range []string{"r1", "r2", "r3"} {
		res := s.rw(ctx, "k", tok, read, 30*time.Second, 0)
		if !res.Acquired || res.Fence <= last {
			s.t.Fatalf("reader %s (fence before %d): %+v, want acquired with a larger fence", tok, last, res)
		}
		last = res.Fence
	}
	res := s.rw(ctx, "k", "w", write, 30*time.Second, 0)
	if res.Acquired || res.HolderTTL <= 0 {
		s.t.Fatalf("writer while readers hold the lock: %+v, want refused with the readers' lease", res)
	}
	for _, tok := range []string{"r1", "r2", "r3"} {
		s.as(driver.KindRead).releaseTombstone(ctx, "k", tok, 0)
	}
	if res := s.rw(ctx, "k", "w", write, 30*time.Second, 0); !res.Acquired || res.Fence <= last {
		s.t.Fatalf("writer after the readers left: %+v, want acquired with a fence above %d", res, last)
	}
}

// A writer excludes readers and other writers until it releases.
func rwWriterExclusive(ctx context.Context, s *suite) {
	w := s.rw(ctx, "k", "w", write, 30*time.Second, 0)
	if !w.Acquired {
		s.t.Fatalf("writer of a free lock: %+v", w)
	}
	if res := s.rw(ctx, "k", "r", read, 30*time.Second, 0); res.Acquired || res.HolderTTL <= 0 {
		s.t.Fatalf("reader while a writer holds the lock: %+v, want refused with the writer's lease", res)
	}
	if res := s.rw(ctx, "k", "w2", write, 30*time.Second, 0); res.Acquired {
		s.t.Fatalf("second writer: %+v, want refused", res)
	}
	if res := s.as(driver.KindRead).releaseTombstone(ctx, "k", "w", 0); !res.Held {
		s.t.Fatalf("writer's release: %+v", res)
	}
	if res := s.rw(ctx, "k", "r", read, 30*time.Second, 0); !res.Acquired || res.Fence <= w.Fence {
		s.t.Fatalf("reader after the writer left: %+v, want acquired with a fence above %d", res, w.Fence)
	}
}

// A refused writer's intent keeps new readers out, not those holding; the
// writer gets the lock once they leave. A writer that withdraws its intent
// (a release by its token) lets readers in again.
func rwWriterPreference(ctx context.Context, s *suite) {
	ops := s.as(driver.KindRead)
	s.rw(ctx, "k", "r1", read, 30*time.Second, 0)
	if res := s.rw(ctx, "k", "w", write, 30*time.Second, 30*time.Second); res.Acquired {
		s.t.Fatalf("writer while a reader holds the lock: %+v, want refused", res)
	}
	if res := s.rw(ctx, "k", "r2", read, 30*time.Second, 0); res.Acquired || res.HolderTTL <= 0 {
		s.t.Fatalf("new reader while a writer waits: %+v, want refused with the intent's lease", res)
	}
	if res := ops.renew(ctx, "k", "r1", 30*time.Second); !res.Held {
		s.t.Fatalf("the holding reader's renewal while a writer waits: %+v, want Held", res)
	}
	ops.releaseTombstone(ctx, "k", "r1", 0)
	w := s.rw(ctx, "k", "w", write, 30*time.Second, 30*time.Second)
	if !w.Acquired {
		s.t.Fatalf("the waiting writer after the last reader left: %+v, want acquired", w)
	}
	ops.releaseTombstone(ctx, "k", "w", 0)

	// Withdrawal: a writer that gives up.
	s.rw(ctx, "k", "r3", read, 30*time.Second, 0)
	s.rw(ctx, "k", "quitter", write, 30*time.Second, 30*time.Second)
	if res := s.rw(ctx, "k", "r4", read, 30*time.Second, 0); res.Acquired {
		s.t.Fatalf("reader while a writer waits: %+v, want refused", res)
	}
	if res := ops.releaseTombstone(ctx, "k", "quitter", 0); res.Held {
		s.t.Fatalf("withdrawal of an intent: %+v, want Held false (it held nothing)", res)
	}
	if res := s.rw(ctx, "k", "r4", read, 30*time.Second, 0); !res.Acquired {
		s.t.Fatalf("reader after the writer withdrew: %+v, want acquired", res)
	}
}

// An intent that is not renewed lapses, and readers get in again; a
// single attempt (intent 0) registers none.
func rwIntentLapses(ctx context.Context, s *suite) {
	s.rw(ctx, "k", "r1", read, 30*time.Second, 0)
	s.rw(ctx, "k", "try", write, 30*time.Second, 0)
	if res := s.rw(ctx, "k", "r2", read, 30*time.Second, 0); !res.Acquired {
		s.t.Fatalf("reader after a single writer attempt: %+v, want acquired (no intent)", res)
	}
	s.rw(ctx, "k", "w", write, 30*time.Second, 300*time.Millisecond)
	res := s.rw(ctx, "k", "r3", read, 30*time.Second, 0)
	if res.Acquired || res.HolderTTL <= 0 || res.HolderTTL > s.leaseGiven(ctx, 300*time.Millisecond) {
		s.t.Fatalf("reader during a 300ms intent: %+v, want refused until the intent lapses", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		if res := s.rw(ctx, "k", "r3", read, 30*time.Second, 0); res.Acquired {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("readers still refused 5s after a 300ms intent")
		}
	}
}

// A reader whose lease ended no longer keeps the writer out, and cannot be
// renewed.
func rwLapsedReaderFreesWriter(ctx context.Context, s *suite) {
	ops := s.as(driver.KindRead)
	s.rw(ctx, "k", "r", read, 300*time.Millisecond, 0)
	if res := s.rw(ctx, "k", "w", write, 30*time.Second, 30*time.Second); res.Acquired || res.HolderTTL > s.leaseGiven(ctx, 300*time.Millisecond) {
		s.t.Fatalf("writer while a 300ms reader holds: %+v, want refused for at most 300ms", res)
	}
	ops.waitLapsed(ctx, "k", "r", 5*time.Second)
	if res := s.rw(ctx, "k", "w", write, 30*time.Second, 30*time.Second); !res.Acquired {
		s.t.Fatalf("writer after the reader's lease ended: %+v, want acquired", res)
	}
	if res := ops.renew(ctx, "k", "r", 30*time.Second); res.Held {
		s.t.Fatalf("renewal of the lapsed reader: %+v, want Held false", res)
	}
}

// A writer whose lease ended (its process was killed: nobody renews it or
// releases it) no longer keeps readers out, however many readers keep
// their places alive meanwhile: a waiting reader's next attempt, and a
// reader's single attempt, get in at once, and the writer's hold cannot be
// renewed.
func rwLapsedWriterLetsReadersIn(ctx context.Context, s *suite) {
	ops := s.as(driver.KindRead)
	w := s.rw(ctx, "k", "w", write, 300*time.Millisecond, 0)
	if !w.Acquired {
		s.t.Fatalf("writer of a free lock: %+v", w)
	}
	// Readers wait with places that outlive the writer's lease, and keep
	// them alive, as waiting readers do while their attempts are refused.
	for _, tok := range []string{"waiting", "other"} {
		if res := s.rw(ctx, "k", tok, read, 30*time.Second, 30*time.Second); res.Acquired {
			s.t.Fatalf("reader %s while the writer holds: %+v, want refused", tok, res)
		}
	}
	ops.waitLapsed(ctx, "k", "w", 5*time.Second)
	if res := s.rw(ctx, "k", "poller", read, 30*time.Second, 0); !res.Acquired || res.Fence <= w.Fence {
		s.t.Fatalf("a reader's single attempt after the writer's lease ended: %+v, want acquired with a fence above %d", res, w.Fence)
	}
	for _, tok := range []string{"waiting", "other"} {
		if res := s.rw(ctx, "k", tok, read, 30*time.Second, 30*time.Second); !res.Acquired || res.Fence <= w.Fence {
			s.t.Fatalf("waiting reader %s after the writer's lease ended: %+v, want acquired with a fence above %d", tok, res, w.Fence)
		}
	}
	if res := ops.renew(ctx, "k", "w", 30*time.Second); res.Held {
		s.t.Fatalf("renewal of the lapsed writer: %+v, want Held false", res)
	}
}

// A retry by a holding token keeps its fence and restarts its lease, even
// while a writer waits.
func rwRetryIsIdempotent(ctx context.Context, s *suite) {
	first := s.rw(ctx, "k", "r", read, 2*time.Second, 0)
	s.rw(ctx, "k", "w", write, 30*time.Second, 30*time.Second)
	again := s.rw(ctx, "k", "r", read, 30*time.Second, 0)
	if !again.Acquired || again.Fence != first.Fence {
		s.t.Fatalf("reader's retry while a writer waits: %+v, want acquired with fence %d", again, first.Fence)
	}
	if ttl := s.as(driver.KindRead).ttlOf(ctx, "k", "r"); ttl <= 2*time.Second {
		s.t.Fatalf("lease after a retry with ttl 30s: %v, want it restarted", ttl)
	}
}

// A tombstoned token is refused, and its intent does not stay.
func rwTombstone(ctx context.Context, s *suite) {
	ops := s.as(driver.KindRead)
	ops.releaseTombstone(ctx, "k", "late", time.Minute)
	if res := s.rw(ctx, "k", "late", write, 30*time.Second, 30*time.Second); res.Acquired {
		s.t.Fatalf("writer with a tombstoned token: %+v, want refused", res)
	}
	if res := s.rw(ctx, "k", "r", read, 30*time.Second, 0); !res.Acquired {
		s.t.Fatalf("reader after a tombstoned writer's attempt: %+v, want acquired (no intent)", res)
	}
}

// The last reader's release wakes a waiting writer; the writer's release
// wakes waiting readers.
func rwNotification(ctx context.Context, s *suite) {
	ops := s.as(driver.KindRead)
	s.rw(ctx, "k", "r", read, 30*time.Second, 0)
	ops.checkNotified(ctx, "k", "r", func() {
		if res := s.rw(ctx, "k", "w", write, 30*time.Second, 0); res.Acquired {
			s.t.Fatalf("writer while a reader holds: %+v, want refused", res)
		}
	})
	s.rw(ctx, "k", "w", write, 30*time.Second, 0)
	ops.checkNotified(ctx, "k", "w", func() {
		if res := s.rw(ctx, "k", "r2", read, 30*time.Second, 0); res.Acquired {
			s.t.Fatalf("reader while a writer holds: %+v, want refused", res)
		}
	})
}

// A read-write lock, the plain lock and the semaphore of one name do not
// block each other.
func rwApartFromOthers(ctx context.Context, s *suite) {
	if res := s.acquire(ctx, "k", "lock", "", 30*time.Second); !res.Acquired {
		s.t.Fatalf("lock: %+v", res)
	}
	if s.st.Supports(driver.KindSemaphore) {
		if res := s.permit(ctx, "k", "permit", 1, 30*time.Second); !res.Acquired {
			s.t.Fatalf("permit: %+v", res)
		}
	}
	if res := s.rw(ctx, "k", "w", write, 30*time.Second, 0); !res.Acquired {
		s.t.Fatalf("writer while the lock and a permit of the same name are held: %+v, want acquired", res)
	}
}

// The writer's release lets the readers that waited (with a place) in
// before the next writer, although that writer's intent is live; readers
// that come later wait for that writer.
func rwReadersTurn(ctx context.Context, s *suite) {
	const ttl, place = 30 * time.Second, 30 * time.Second
	w1 := s.rw(ctx, "k", "w1", write, ttl, place)
	if !w1.Acquired {
		s.t.Fatalf("first writer: %+v", w1)
	}
	for _, tok := range []string{"r1", "r2"} {
		if res := s.rw(ctx, "k", tok, read, ttl, place); res.Acquired {
			s.t.Fatalf("reader %s while a writer holds: %+v, want refused", tok, res)
		}
	}
	if res := s.rw(ctx, "k", "w2", write, ttl, place); res.Acquired {
		s.t.Fatalf("second writer while the first holds: %+v, want refused", res)
	}
	s.as(driver.KindRead).releaseTombstone(ctx, "k", "w1", 0)
	if res := s.rw(ctx, "k", "w2", write, ttl, place); res.Acquired || res.HolderTTL <= 0 {
		s.t.Fatalf("second writer before the readers admitted by the first's release came: %+v, want refused", res)
	}
	if res := s.rw(ctx, "k", "late", read, ttl, place); res.Acquired {
		s.t.Fatalf("a reader that did not wait, while a writer waits: %+v, want refused", res)
	}
	for _, tok := range []string{"r1", "r2"} {
		if res := s.rw(ctx, "k", tok, read, ttl, place); !res.Acquired || res.Fence <= w1.Fence {
			s.t.Fatalf("admitted reader %s despite the waiting writer: %+v, want acquired with a fence above %d", tok, res, w1.Fence)
		}
	}
	s.as(driver.KindRead).releaseTombstone(ctx, "k", "r1", 0)
	s.as(driver.KindRead).releaseTombstone(ctx, "k", "r2", 0)
	if res := s.rw(ctx, "k", "w2", write, ttl, place); !res.Acquired {
		s.t.Fatalf("second writer after the admitted readers left: %+v, want acquired", res)
	}
}

// A reader admitted by a writer's release that never comes holds the next
// writer up until its place lapses, no longer; one that gives up (a
// release by its token) at once.
func rwAdmittedReaderLapses(ctx context.Context, s *suite) {
	const ttl = 30 * time.Second
	s.rw(ctx, "k", "w1", write, ttl, ttl)
	s.rw(ctx, "k", "gone", read, ttl, 300*time.Millisecond)
	s.rw(ctx, "k", "quitter", read, ttl, ttl)
	s.as(driver.KindRead).releaseTombstone(ctx, "k", "w1", 0)
	if res := s.as(driver.KindRead).releaseTombstone(ctx, "k", "quitter", 0); res.Held {
		s.t.Fatalf("an admitted reader's withdrawal: %+v, want Held false (it held nothing)", res)
	}
	res := s.rw(ctx, "k", "w2", write, ttl, ttl)
	if res.Acquired || res.HolderTTL <= 0 || res.HolderTTL > s.leaseGiven(ctx, 300*time.Millisecond) {
		s.t.Fatalf("writer while an admitted reader's 300ms place runs: %+v, want refused for at most 300ms", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		if res := s.rw(ctx, "k", "w2", write, ttl, ttl); res.Acquired {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("writer still refused 5s after the admitted reader's 300ms place")
		}
	}
}
