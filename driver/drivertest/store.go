package drivertest

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// storeChecks are the checks of one store: rules of one kind, or across
// kinds, and the capabilities.
var storeChecks = []struct {
	name    string
	run     func(ctx context.Context, s *suite)
	applies func(driver.Store) bool // nil: every store
}{
	{"LockReentry", lockReentry, nil},
	{"UnsupportedKindRefused", unsupportedKindRefused, nil},
	{"KindsApart", kindsApart, nil},
	{"MixedRenewBatch", mixedRenewBatch, nil},
	{"SemaphorePermits", semaphorePermits, supports(driver.KindSemaphore)},
	{"WriterExcludesReaders", writerExcludesReaders, supports(driver.KindRead, driver.KindWrite)},
	{"WatchRelease", watchRelease, has[driver.Notifier]},
	{"LineOrder", lineOrder, has[driver.Lines]},
	{"HandOff", handOff, has[driver.Lines]},
	{"Inspect", inspect, has[driver.Inspector]},
	{"TickClaimed", tickClaimed, has[driver.Ticker]},
}

// supports is a storeChecks condition: the store takes holds of every kind in ks.
func supports(ks ...driver.Kind) func(driver.Store) bool {
	return func(st driver.Store) bool {
		for _, k := range ks {
			if !st.Supports(k) {
				return false
			}
		}
		return true
	}
}

// has is a storeChecks condition: the store has capability T.
func has[T any](st driver.Store) bool {
	_, ok := st.(T)
	return ok
}

// supported returns the kinds s's store supports, failing the check when
// it does not support KindLock.
func (s *suite) supported() []driver.Kind {
	s.t.Helper()
	var ks []driver.Kind
	for _, k := range kinds {
		if s.st.Supports(k) {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 || ks[0] != driver.KindLock {
		s.t.Fatalf("%T does not support KindLock", s.st)
	}
	return ks
}

func lockReentry(ctx context.Context, s *suite) {
	first := s.acquire(ctx, driver.KindLock, "k", "a", 10*time.Second)
	req := s.request(driver.KindLock, "k", "a2", 10*time.Second)
	req.Owner = "a"
	again := s.acquireReq(ctx, req)
	if !again.Acquired || again.Fence != first.Fence || again.Holds != 2 {
		s.t.Fatalf("re-entry: %+v after %+v, want the same fence and 2 holds", again, first)
	}
	if rel := s.release(ctx, driver.KindLock, "k", "a", 0); !rel.Held || rel.Remaining != 1 {
		s.t.Fatalf("release of one of two holds: %+v, want 1 remaining", rel)
	}
}

func unsupportedKindRefused(ctx context.Context, s *suite) {
	for _, k := range kinds {
		if s.st.Supports(k) {
			continue
		}
		_, err := s.st.Acquire(ctx, s.request(k, "k", "a", 10*time.Second))
		if !errors.Is(err, driver.ErrUnsupported) {
			s.t.Errorf("Acquire of an unsupported %v: %v, want ErrUnsupported", k, err)
		}
	}
}

func kindsApart(ctx context.Context, s *suite) {
	for _, k := range s.supported() {
		if k == driver.KindRead {
			continue // the write hold is the read-write lock's exclusive one
		}
		if res := s.acquire(ctx, k, "k", "a-"+k.String(), 10*time.Second); !res.Acquired {
			s.t.Fatalf("%v of a name whose other kinds are held: %+v, want acquired", k, res)
		}
	}
}

func mixedRenewBatch(ctx context.Context, s *suite) {
	var reqs []driver.RenewRequest
	for _, k := range s.supported() {
		if k == driver.KindRead {
			continue
		}
		tok := "a-" + k.String()
		s.acquire(ctx, k, "k", tok, time.Second)
		reqs = append(reqs, driver.RenewRequest{Ref: s.ref(k, "k", tok), TTL: 20 * time.Second})
	}
	reqs = append(reqs, driver.RenewRequest{Ref: s.ref(driver.KindLock, "k", "nobody"), TTL: 20 * time.Second})
	res, err := s.st.Renew(ctx, reqs)
	if err != nil || len(res) != len(reqs) {
		s.t.Fatalf("Renew of a mixed batch: %v %v", res, err)
	}
	for i, r := range res {
		want := i < len(reqs)-1
		if r.Err != nil || r.Held != want {
			s.t.Errorf("renewal %d (%v): %+v, want held %v", i, reqs[i].Kind, r, want)
		}
	}
}

func semaphorePermits(ctx context.Context, s *suite) {
	for i, tok := range []string{"a", "b", "c"} {
		req := s.request(driver.KindSemaphore, "k", tok, 10*time.Second)
		req.Permits = 2
		if res := s.acquireReq(ctx, req); res.Acquired != (i < 2) {
			s.t.Fatalf("permit %d of 2: %+v", i+1, res)
		}
	}
	if rel := s.release(ctx, driver.KindSemaphore, "k", "a", 0); !rel.Held || rel.Remaining != 0 {
		s.t.Fatalf("release of a permit: %+v", rel)
	}
}

func writerExcludesReaders(ctx context.Context, s *suite) {
	s.acquire(ctx, driver.KindRead, "k", "r", 10*time.Second)
	if res := s.acquire(ctx, driver.KindWrite, "k", "w", 10*time.Second); res.Acquired {
		s.t.Fatalf("a writer while a reader holds: %+v", res)
	}
	s.release(ctx, driver.KindRead, "k", "r", 0)
	if res := s.acquire(ctx, driver.KindWrite, "k", "w", 10*time.Second); !res.Acquired {
		s.t.Fatalf("a writer once the reader left: %+v", res)
	}
	if res := s.acquire(ctx, driver.KindRead, "k", "r2", 10*time.Second); res.Acquired {
		s.t.Fatalf("a reader while the writer holds: %+v", res)
	}
}
