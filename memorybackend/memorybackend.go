// Package memorybackend is an in-memory driver.Store
// for tests: of the Client's timing and failure handling, under
// testing/synctest, and of anything else that needs a lock store without a
// server. It keeps every kind of hold and has every capability.
//
// It keeps the contract of package driver (per-hold leases, release
// tombstones, fences that strictly increase, one attempt per call) and
// checks it with drivertest.Run, like the Redis backend. Time is time.Now and Go timers only, so inside a synctest bubble
// leases, delays and context deadlines all run on the bubble's fake clock:
// a test advances time by sleeping, and nothing in the backend waits for
// real time.
//
// What it adds over a real server is fault injection on demand, for the
// failures a Client must survive but a real server cannot produce at a
// chosen moment:
//
//   - a request delayed on its way to the store (Fault.RequestDelay), which
//     is still applied when it arrives, even after its caller gave up;
//   - a reply delayed on its way back (Fault.ReplyDelay);
//   - a store that cannot be reached (Fault.Refuse): the request is not
//     applied;
//   - a reply lost after the request was applied (Fault.LoseReply);
//   - a stopped store (Pause): requests wait, unapplied, until it resumes,
//     and are then applied in arrival order, also those whose callers gave
//     up, like a SIGSTOPped Redis whose socket buffers still hold them.
//
// Tests observe the store with Calls (requests attempted and applied per
// operation) and State (a lock's owner, fence, live holds and tombstones),
// and can lose a lock with Delete, as an operator's DEL or a failover would.
//
// Under synctest, make the Backend inside the bubble (its channels then
// belong to the bubble) and Close it there: Close waits for the requests
// still in flight, which takes only virtual time.
//
// It is not a lock store for production: nothing is shared between
// processes and nothing survives the process.
//
// Use it to unit-test code that takes locks: pass New() to fencelock.New
// where the service passes redisbackend.New(rdb). The examples show a
// store outage and, in a synctest bubble, a lease that runs out in virtual
// time.
package memorybackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Errors a call can return besides the context's error and argument errors.
// None of them matches driver.ErrInvalidArgument, so the Client treats
// them as the store being unavailable.
var (
	// ErrRefused is returned by a call that a Fault with Refuse failed: the
	// request never reached the store and was not applied.
	ErrRefused = errors.New("memorybackend: connection refused")

	// ErrReplyLost is returned by a call that a Fault with LoseReply failed:
	// the request was applied, but its reply never came back.
	ErrReplyLost = errors.New("memorybackend: connection reset")

	// ErrClosed is returned by calls made after Close, and by calls still
	// waiting (paused or delayed) when Close is called. A request that was
	// in flight may still be applied (see Close).
	ErrClosed = errors.New("memorybackend: backend closed")
)

// Op is a set of backend operations, as bits: Fault.Ops and Calls take a
// set such as Acquire|Renew.
type Op uint8

// The operations of a driver.Store, of any kind of hold (AcquireInLine and
// AcquireTick are Acquire, HandOff is Release). A Renew batch is one call.
// Watch is not an Op: it is never delayed, refused or counted.
const (
	Acquire Op = 1 << iota
	Release
	Renew
	TTL

	// AllOps is every operation.
	AllOps = Acquire | Release | Renew | TTL
)

// String returns the operations' names joined by '|', such as
// "acquire|renew".
func (o Op) String() string {
	var names []string
	for _, n := range []struct {
		op   Op
		name string
	}{{Acquire, "acquire"}, {Release, "release"}, {Renew, "renew"}, {TTL, "ttl"}} {
		if o&n.op != 0 {
			names = append(names, n.name)
		}
	}
	if rest := o &^ AllOps; rest != 0 {
		names = append(names, fmt.Sprintf("Op(%#x)", uint8(rest)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// opIndex is the index of a single op in per-op arrays.
func opIndex(o Op) int {
	switch o {
	case Acquire:
		return 0
	case Release:
		return 1
	case Renew:
		return 2
	default:
		return 3
	}
}

// Backend is an in-memory driver.Store, with every capability and with
// fault injection. Make it with New; it is safe for concurrent use.
// The zero value is not usable.
type Backend struct {
	mu    sync.Mutex
	locks map[lockID]*lock
	// watchers maps a lock's wake-up channels to whether each is a change
	// watcher (a WatchRequest with Changes).
	watchers         map[lockID]map[chan struct{}]bool
	fair             fairState     // lines of fair waiters (fair.go)
	granted          int           // releases that handed the lock to a fair waiter
	noGrants         bool          // DisableGrants
	loseGrantNotices bool          // LoseGrantNotices
	noHandOff        bool          // DisableHandOff
	handedOff        int           // releases that handed the lock over (HandOff)
	holds            holdState     // semaphores and read-write locks (semaphore.go)
	faults           []*faultEntry // in injection order; the newest match applies
	paused           int           // Pause calls not yet resumed
	queue            []*request    // requests that arrived while paused, in order
	counts           [4]Calls      // per op, by opIndex
	closed           bool

	closing chan struct{} // closed by Close: calls waiting give up
	calls   sync.WaitGroup
}

// New returns an empty Backend: every lock free, no fault, not paused. It
// starts no goroutine.
func New() *Backend {
	return &Backend{
		locks:    map[lockID]*lock{},
		watchers: map[lockID]map[chan struct{}]bool{},
		closing:  make(chan struct{}),
	}
}

// Close makes later calls fail with ErrClosed, and calls still waiting
// (paused, or in a delay) return ErrClosed at once. It then waits for every
// goroutine the backend started: requests still in flight (RequestDelay)
// whose callers gave up are applied when their delay ends, and Close
// returns after that. Requests held by a pause stay queued, and are applied
// only if the pause is resumed. The state stays readable (State) after
// Close. Close is idempotent and returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.closing)
	}
	b.mu.Unlock()
	b.calls.Wait()
	return nil
}

// Acquire implements driver.Store, for every kind of hold.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	switch req.Kind {
	case driver.KindLock:
	case driver.KindSemaphore:
		return b.acquirePermit(ctx, req)
	case driver.KindRead, driver.KindWrite:
		return b.acquireRW(ctx, req)
	default:
		return driver.Result{}, unsupportedKind(req.Kind)
	}
	if err := checkRef(req.Ref); err != nil {
		return driver.Result{}, err
	}
	if req.Owner == "" {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "owner", Value: req.Owner, Reason: "must not be empty"}
	}
	if err := checkTTL(req.TTL); err != nil {
		return driver.Result{}, err
	}
	return do(b, ctx, Acquire, func(now time.Time) (driver.Result, error) {
		id := idOf(req.Ref)
		res := b.lockFor(id).acquire(now, req)
		b.acquiredLocked(id, req, res)
		return res, nil
	})
}

// acquiredLocked wakes the change watchers of id when req, with Notify,
// took the lock (res: not a re-entry). b.mu must be held.
func (b *Backend) acquiredLocked(id lockID, req driver.Request, res driver.Result) {
	if req.Notify && res.Acquired && res.Holds == 1 {
		b.notifyWatchersLocked(id, true)
	}
}

// Release implements driver.Store. A Tombstone > 0 is recorded for the
// token whether or not the lock held it; a later Release with a tombstone
// never shortens an earlier one. Watchers are notified when the release
// frees the lock: the first fair waiter in line only, if there is one
// (fair.go). A token that held nothing leaves the line of fair waiters.
func (b *Backend) Release(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	switch req.Kind {
	case driver.KindLock:
	case driver.KindSemaphore, driver.KindRead, driver.KindWrite:
		return b.releaseHold(ctx, req.Kind != driver.KindSemaphore, req)
	default:
		return driver.ReleaseResult{}, unsupportedKind(req.Kind)
	}
	if err := checkRef(req.Ref); err != nil {
		return driver.ReleaseResult{}, err
	}
	return do(b, ctx, Release, func(now time.Time) (driver.ReleaseResult, error) {
		id := idOf(req.Ref)
		res, freed := b.lockFor(id).release(now, req)
		b.afterRelease(id, now, req.Token, res.Held, freed)
		return res, nil
	})
}

// releaseHandOff is HandOff of a KindLock: Release, and Acquire
// of next in the same step when the release freed the lock, no acquire was
// refused while it was held, and no fair waiter is in line. The call counts
// as a Release; DisableHandOff makes it release only.
func (b *Backend) releaseHandOff(ctx context.Context, req driver.ReleaseRequest, next driver.Request) (driver.ReleaseResult, driver.Result, error) {
	if err := checkRef(req.Ref); err != nil {
		return driver.ReleaseResult{}, driver.Result{}, err
	}
	if err := checkRef(next.Ref); err != nil {
		return driver.ReleaseResult{}, driver.Result{}, err
	}
	if next.Namespace != req.Namespace || next.Key != req.Key || next.Owner != next.Token {
		return driver.ReleaseResult{}, driver.Result{}, &driver.InvalidArgumentError{
			Name: "next", Value: next.Namespace + "/" + next.Key + " owner " + next.Owner,
			Reason: "must name the released lock, with Owner equal to Token"}
	}
	if err := checkTTL(next.TTL); err != nil {
		return driver.ReleaseResult{}, driver.Result{}, err
	}
	type both struct {
		rel driver.ReleaseResult
		acq driver.Result
	}
	r, err := do(b, ctx, Release, func(now time.Time) (both, error) {
		id := idOf(req.Ref)
		l := b.lockFor(id)
		waited := l.waited
		rel, freed := l.release(now, req)
		var acq driver.Result
		if head, _ := b.fair.head(id, now); freed && !waited && head == "" && !b.noHandOff {
			acq = l.acquire(now, next)
			if acq.Acquired {
				b.handedOff++
				if req.Notify {
					b.notifyLocked(id) // the holder changed: watchers asked to know
				}
				return both{rel, acq}, nil // held again: no waiter to wake
			}
		}
		b.afterRelease(id, now, req.Token, rel.Held, freed)
		return both{rel, acq}, nil
	})
	return r.rel, r.acq, err
}

// DisableHandOff makes HandOff release only, as a backend without
// hand-offs would.
func (b *Backend) DisableHandOff() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.noHandOff = true
}

// HandOffs returns how many releases handed the lock to the next request
// (HandOff).
func (b *Backend) HandOffs() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.handedOff
}

// Renew implements driver.Store: the batch, which
// may mix kinds of hold, is one call, applied in one step. Every request is checked before anything is sent: an invalid one
// fails the whole batch with an InvalidArgumentError. RenewResult.Err is
// never set (the store has no per-lock failures). An empty batch makes no
// call.
func (b *Backend) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	for _, r := range reqs {
		if r.Kind > driver.KindWrite {
			return nil, unsupportedKind(r.Kind)
		}
		if err := checkRef(r.Ref); err != nil {
			return nil, err
		}
		if err := checkTTL(r.TTL); err != nil {
			return nil, err
		}
	}
	if len(reqs) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return []driver.RenewResult{}, nil
	}
	reqs = slices.Clone(reqs) // applied later, maybe after the call returned
	return do(b, ctx, Renew, func(now time.Time) ([]driver.RenewResult, error) {
		results := make([]driver.RenewResult, len(reqs))
		for i, r := range reqs {
			if r.Kind != driver.KindLock {
				if s := b.holds.sets[holdIDOf(r.Kind != driver.KindSemaphore, r.Ref)]; s != nil {
					results[i].Held = s.renew(now, r)
				}
			} else if l := b.locks[idOf(r.Ref)]; l != nil {
				results[i].Held = l.renew(now, r)
			}
		}
		return results, nil
	})
}

// TTL implements driver.Store: the remaining lease of the hold itself
// (not of the lock), or an error matching driver.ErrNotHeld.
func (b *Backend) TTL(ctx context.Context, ref driver.Ref) (time.Duration, error) {
	switch ref.Kind {
	case driver.KindLock:
	case driver.KindSemaphore, driver.KindRead, driver.KindWrite:
		return b.holdTTL(ctx, ref.Kind != driver.KindSemaphore, ref)
	default:
		return 0, unsupportedKind(ref.Kind)
	}
	if err := checkRef(ref); err != nil {
		return 0, err
	}
	return do(b, ctx, TTL, func(now time.Time) (time.Duration, error) {
		if l := b.locks[idOf(ref)]; l != nil {
			l.prune(now)
			if i := l.find(ref.Token); i >= 0 {
				return l.holds[i].end.Sub(now), nil
			}
		}
		return 0, fmt.Errorf("memorybackend: TTL of lock %q in namespace %q, token %q: %w",
			ref.Key, ref.Namespace, ref.Token, driver.ErrNotHeld)
	})
}

// watch registers a release watcher of the lock, or a change watcher
// (changes). The watch is ready at once. Its channel (buffered, one pending
// value) gets a value when a Release frees the lock, at the moment the
// release is applied, and, for a change watcher, when an acquisition with
// Notify takes the lock (an Acquire, an AcquireInLine, or a release that
// grants the lock to a fair waiter whose request has Notify). Like the
// Redis backend, it does not notify when the lock becomes free because its
// leases ended, or because of Delete: waiters find those with their
// fallback timers. Watches are not subject to faults or Pause. It fails
// with ErrClosed after Close.
func (b *Backend) watch(ctx context.Context, namespace, key string, changes bool) (*driver.Watch, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := lockID{namespace, key}
	c := make(chan struct{}, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.watchers[id] == nil {
		b.watchers[id] = map[chan struct{}]bool{}
	}
	b.watchers[id][c] = changes
	return driver.NewWatch(c, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.watchers[id], c)
		if len(b.watchers[id]) == 0 {
			delete(b.watchers, id)
		}
	}), nil
}

// notifyLocked wakes the watchers of id, coalescing. b.mu must be held.
func (b *Backend) notifyLocked(id lockID) {
	b.notifyWatchersLocked(id, false)
}

// notifyWatchersLocked wakes the watchers of id, coalescing: the change
// watchers only, or all of them. b.mu must be held.
func (b *Backend) notifyWatchersLocked(id lockID, changesOnly bool) {
	for c, changes := range b.watchers[id] {
		if changesOnly && !changes {
			continue
		}
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// lockFor returns the lock id, creating it (free). b.mu must be held.
func (b *Backend) lockFor(id lockID) *lock {
	l := b.locks[id]
	if l == nil {
		l = &lock{}
		b.locks[id] = l
	}
	return l
}

// checkRef validates the names a real store would refuse or that can only
// be a caller's bug: an empty key or token.
func checkRef(ref driver.Ref) error {
	if err := checkKey(ref.Key); err != nil {
		return err
	}
	if ref.Token == "" {
		return &driver.InvalidArgumentError{Name: "token", Value: ref.Token, Reason: "must not be empty"}
	}
	return nil
}

func checkKey(key string) error {
	if key == "" {
		return &driver.InvalidArgumentError{Name: "key", Value: key, Reason: "must not be empty"}
	}
	return nil
}

func checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return &driver.InvalidArgumentError{Name: "ttl", Value: ttl, Reason: "must be positive"}
	}
	return nil
}
