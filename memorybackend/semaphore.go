package memorybackend

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Semaphores (driver.KindSemaphore) and read-write locks (driver.KindRead,
// KindWrite) keep their holds alike: a set of tokens, each
// with its lease and fence, one fence counter per semaphore or read-write
// lock, and for a read-write lock the writer and the intents of waiting
// writers. They are apart from the plain lock of the same name. Every
// operation is one of Acquire, Release, Renew or TTL for faults and Calls.

// holdState is the Backend's semaphores and read-write locks, and the
// watches of their releases. Guarded by Backend.mu.
type holdState struct {
	sets     map[holdID]*holdSet
	watchers map[holdID]map[chan struct{}]struct{}
}

// holdID names a semaphore or a read-write lock.
type holdID struct {
	rw             bool
	namespace, key string
}

// holdSet is the state of one semaphore or read-write lock. It is never
// deleted, so that its fence counter is never reset.
type holdSet struct {
	holds      map[string]holdEntry // live holds by token
	counter    int64                // the last fence minted
	writer     string               // rw: the writer's token while it holds the lock
	intents    map[string]time.Time // rw: waiting writers' intents, by token, with when each lapses
	readers    map[string]time.Time // rw: waiting readers' places, likewise
	admitted   map[string]time.Time // rw: readers the last writer's release let in ahead of writers
	tombstones map[string]time.Time
}

type holdEntry struct {
	end   time.Time
	fence int64
}

// set returns the semaphore or read-write lock id, creating it (empty).
func (h *holdState) set(id holdID) *holdSet {
	if h.sets == nil {
		h.sets = map[holdID]*holdSet{}
	}
	s := h.sets[id]
	if s == nil {
		s = &holdSet{holds: map[string]holdEntry{}, intents: map[string]time.Time{}, readers: map[string]time.Time{},
			admitted: map[string]time.Time{}, tombstones: map[string]time.Time{}}
		h.sets[id] = s
	}
	return s
}

// prune drops what ended by now: holds, the writer mark, places and
// tombstones.
func (s *holdSet) prune(now time.Time) {
	maps.DeleteFunc(s.holds, func(_ string, h holdEntry) bool { return !h.end.After(now) })
	if _, ok := s.holds[s.writer]; !ok {
		s.writer = ""
	}
	for _, m := range []map[string]time.Time{s.intents, s.readers, s.admitted, s.tombstones} {
		maps.DeleteFunc(m, func(_ string, end time.Time) bool { return !end.After(now) })
	}
}

// ends returns the lease ends of the live holds, sorted.
func (s *holdSet) ends() []time.Time {
	ends := make([]time.Time, 0, len(s.holds))
	for _, h := range s.holds {
		ends = append(ends, h.end)
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	return ends
}

// waitFor is a refused acquire's HolderTTL: the time until end (at least
// 1ms), or 0 when end is zero (unknown).
func waitFor(end, now time.Time) time.Duration {
	if end.IsZero() {
		return 0
	}
	return max(end.Sub(now), time.Millisecond)
}

// take gives token a new hold with a new fence.
func (s *holdSet) take(now time.Time, req driver.Request) driver.Result {
	s.counter = max(s.counter, req.FenceFloor) + 1
	s.holds[req.Token] = holdEntry{end: now.Add(req.TTL), fence: s.counter}
	return driver.Result{Acquired: true, Fence: s.counter, Holds: 1}
}

// retry restarts the lease of token's live hold (a retry of an acquire
// whose reply was lost); ok is false when it has none.
func (s *holdSet) retry(now time.Time, req driver.Request) (res driver.Result, ok bool) {
	h, ok := s.holds[req.Token]
	if !ok {
		return res, false
	}
	h.end = now.Add(req.TTL)
	s.holds[req.Token] = h
	return driver.Result{Acquired: true, Fence: h.fence, Holds: 1}, true
}

// acquirePermit is Acquire of a permit, applied to s.
func (s *holdSet) acquirePermit(now time.Time, req driver.Request) driver.Result {
	s.prune(now)
	var first time.Time
	if ends := s.ends(); len(ends) > 0 {
		first = ends[0]
	}
	if _, ok := s.tombstones[req.Token]; ok {
		return driver.Result{HolderTTL: waitFor(first, now)}
	}
	if res, ok := s.retry(now, req); ok {
		return res
	}
	if len(s.holds) < req.Permits {
		return s.take(now, req)
	}
	return driver.Result{HolderTTL: waitFor(first, now)}
}

// acquireRW is Acquire of a read or write hold, applied to s.
func (s *holdSet) acquireRW(now time.Time, req driver.Request) driver.Result {
	s.prune(now)
	ends := s.ends()
	var last time.Time
	if len(ends) > 0 {
		last = ends[len(ends)-1]
	}
	if _, ok := s.tombstones[req.Token]; ok {
		s.dropPlaces(req.Token)
		return driver.Result{HolderTTL: waitFor(last, now)}
	}
	if res, ok := s.retry(now, req); ok {
		return res
	}
	if req.Kind == driver.KindWrite {
		if len(s.holds) == 0 && len(s.admitted) == 0 {
			s.dropPlaces(req.Token)
			s.writer = req.Token
			return s.take(now, req)
		}
		if req.Place > 0 {
			s.intents[req.Token] = now.Add(req.Place)
		}
		// Every live hold, and every admitted reader, must be gone first.
		for _, end := range s.admitted {
			if end.After(last) {
				last = end
			}
		}
		return driver.Result{HolderTTL: waitFor(last, now)}
	}
	_, admitted := s.admitted[req.Token]
	if s.writer == "" && (admitted || len(s.intents) == 0) {
		s.dropPlaces(req.Token)
		return s.take(now, req)
	}
	if req.Place > 0 {
		s.readers[req.Token] = now.Add(req.Place)
	}
	// The writer's lease, or the earliest intent (it may lapse), bounds
	// the wait.
	var until time.Time
	if s.writer != "" {
		until = s.holds[s.writer].end
	}
	for _, end := range s.intents {
		if until.IsZero() || end.Before(until) {
			until = end
		}
	}
	return driver.Result{HolderTTL: waitFor(until, now)}
}

// dropPlaces withdraws every place of token; it reports whether it had an
// intent and whether it was admitted.
func (s *holdSet) dropPlaces(token string) (intent, admitted bool) {
	_, intent = s.intents[token]
	_, admitted = s.admitted[token]
	delete(s.intents, token)
	delete(s.readers, token)
	delete(s.admitted, token)
	return intent, admitted
}

// release gives up token's hold, or withdraws its places. wake reports
// whether the release may let a waiter in (see the interfaces' contracts).
// The writer's release admits the readers waiting.
func (s *holdSet) release(now time.Time, rw bool, req driver.ReleaseRequest) (res driver.ReleaseResult, wake bool) {
	if req.Tombstone > 0 {
		end := now.Add(req.Tombstone)
		if old, ok := s.tombstones[req.Token]; !ok || old.Before(end) {
			s.tombstones[req.Token] = end
		}
	}
	h, had := s.holds[req.Token]
	delete(s.holds, req.Token)
	intent, wasAdmitted := s.dropPlaces(req.Token)
	wasWriter := had && s.writer == req.Token
	if wasWriter {
		s.writer = ""
		maps.Copy(s.admitted, s.readers) // the readers' turn
		clear(s.readers)
	}
	s.prune(now)
	wake = had
	if rw {
		free := len(s.holds) == 0 && len(s.admitted) == 0
		wake = wasWriter || (had && free) || (wasAdmitted && free) || (intent && len(s.intents) == 0)
	}
	return driver.ReleaseResult{Held: had && h.end.After(now)}, wake
}

// renew sets the lease of token's live hold to ttl from now.
func (s *holdSet) renew(now time.Time, req driver.RenewRequest) bool {
	h, ok := s.holds[req.Token]
	if !ok || !h.end.After(now) {
		return false
	}
	h.end = now.Add(req.TTL)
	s.holds[req.Token] = h
	return true
}

// acquirePermit is Acquire of a KindSemaphore.
func (b *Backend) acquirePermit(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := checkHoldAcquire(req); err != nil {
		return driver.Result{}, err
	}
	if req.Permits < 1 {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "semaphore permits", Value: req.Permits, Reason: "must be at least 1"}
	}
	return do(b, ctx, Acquire, func(now time.Time) (driver.Result, error) {
		return b.holds.set(holdIDOf(false, req.Ref)).acquirePermit(now, req), nil
	})
}

// acquireRW is Acquire of a KindRead or KindWrite.
func (b *Backend) acquireRW(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := checkHoldAcquire(req); err != nil {
		return driver.Result{}, err
	}
	if req.Place < 0 {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "place", Value: req.Place, Reason: "must not be negative"}
	}
	return do(b, ctx, Acquire, func(now time.Time) (driver.Result, error) {
		return b.holds.set(holdIDOf(true, req.Ref)).acquireRW(now, req), nil
	})
}

// releaseHold is Release of a semaphore's permit or a read-write lock's
// hold (rw). Watchers are woken when a permit is released, and by the
// release of the writer or of the last reader, and by the withdrawal of the
// last intent.
func (b *Backend) releaseHold(ctx context.Context, rw bool, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	if err := checkRef(req.Ref); err != nil {
		return driver.ReleaseResult{}, err
	}
	return do(b, ctx, Release, func(now time.Time) (driver.ReleaseResult, error) {
		id := holdIDOf(rw, req.Ref)
		res, wake := b.holds.set(id).release(now, rw, req)
		if wake {
			for c := range b.holds.watchers[id] {
				select {
				case c <- struct{}{}:
				default:
				}
			}
		}
		return res, nil
	})
}

// holdTTL is TTL of a semaphore's permit or a read-write lock's hold (rw).
func (b *Backend) holdTTL(ctx context.Context, rw bool, ref driver.Ref) (time.Duration, error) {
	if err := checkRef(ref); err != nil {
		return 0, err
	}
	return do(b, ctx, TTL, func(now time.Time) (time.Duration, error) {
		if s := b.holds.sets[holdIDOf(rw, ref)]; s != nil {
			if h, ok := s.holds[ref.Token]; ok && h.end.After(now) {
				return h.end.Sub(now), nil
			}
		}
		return 0, fmt.Errorf("memorybackend: TTL of %q in namespace %q, token %q: %w",
			ref.Key, ref.Namespace, ref.Token, driver.ErrNotHeld)
	})
}

// watchPermits is Watch of a KindSemaphore, as watch is of a lock.
func (b *Backend) watchPermits(ctx context.Context, namespace, key string) (*driver.Watch, error) {
	return b.watchHolds(ctx, holdID{false, namespace, key})
}

// watchRW is Watch of a KindRead or KindWrite, as watch is of a lock.
func (b *Backend) watchRW(ctx context.Context, namespace, key string) (*driver.Watch, error) {
	return b.watchHolds(ctx, holdID{true, namespace, key})
}

func (b *Backend) watchHolds(ctx context.Context, id holdID) (*driver.Watch, error) {
	if err := checkKey(id.key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := make(chan struct{}, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.holds.watchers == nil {
		b.holds.watchers = map[holdID]map[chan struct{}]struct{}{}
	}
	if b.holds.watchers[id] == nil {
		b.holds.watchers[id] = map[chan struct{}]struct{}{}
	}
	b.holds.watchers[id][c] = struct{}{}
	return driver.NewWatch(c, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.holds.watchers[id], c)
		if len(b.holds.watchers[id]) == 0 {
			delete(b.holds.watchers, id)
		}
	}), nil
}

// HoldState is the state of a semaphore or read-write lock, for tests.
type HoldState struct {
	Holds    map[string]time.Time // live holds: token → lease end
	Fences   map[string]int64     // live holds: token → fence
	Writer   string               // read-write lock: the writer's token while it holds the lock
	Intents  []string             // read-write lock: tokens of waiting writers with a live intent, sorted
	Readers  []string             // read-write lock: tokens of waiting readers with a live place, sorted
	Admitted []string             // read-write lock: tokens of readers let in ahead of writers, sorted
	Counter  int64                // the last fence minted
}

// SemaphoreState returns the live permits of the semaphore named key.
func (b *Backend) SemaphoreState(namespace, key string) HoldState {
	return b.holdState(holdID{false, namespace, key})
}

// RWState returns the live holds and intents of the read-write lock named
// key.
func (b *Backend) RWState(namespace, key string) HoldState {
	return b.holdState(holdID{true, namespace, key})
}

func (b *Backend) holdState(id holdID) HoldState {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := HoldState{Holds: map[string]time.Time{}, Fences: map[string]int64{}}
	s := b.holds.sets[id]
	if s == nil {
		return st
	}
	s.prune(time.Now())
	for tok, h := range s.holds {
		st.Holds[tok], st.Fences[tok] = h.end, h.fence
	}
	st.Writer, st.Counter = s.writer, s.counter
	st.Intents = slices.Sorted(maps.Keys(s.intents))
	st.Readers = slices.Sorted(maps.Keys(s.readers))
	st.Admitted = slices.Sorted(maps.Keys(s.admitted))
	return st
}

func holdIDOf(rw bool, ref driver.Ref) holdID { return holdID{rw, ref.Namespace, ref.Key} }

// checkHoldAcquire validates an acquire of a permit or a read-write hold.
func checkHoldAcquire(req driver.Request) error {
	if err := checkRef(req.Ref); err != nil {
		return err
	}
	return checkTTL(req.TTL)
}
