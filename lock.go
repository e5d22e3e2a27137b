package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/lease"
)

// Lock is one acquisition of a lock, or a hold of another primitive: a
// semaphore's permit (Semaphore), a read or write hold (RWLock). Its methods
// are safe for concurrent use. Release it when done (Do does that for you);
// a Lock that is lost or released stays so. Every method of a nil *Lock
// returns an error (or a zero value), never panics.
//
// A lease guarantees mutual exclusion only while the holder is running and
// in touch with the server. A process that is paused (GC, SIGSTOP, swap) or
// cut off can go on believing it holds the lock after its lease has ended
// and another process has taken it. Pass Fence to the protected resource and
// let the resource reject writes with a fence lower than one it has already
// accepted: that check is what makes a late write harmless.
type Lock struct {
	client    *Client
	ref       driver.Ref // with the hold's Kind: every request for it goes to the store with it
	fence     int64
	holds     int
	autoRenew time.Duration // 0: no automatic renewal
	// sent is when the acquiring request was sent. WithMaxHold's bound
	// (lease.go) counts from it, and so does the hold time Hooks report.
	sent    time.Time
	maxHold time.Duration // WithMaxHold; 0: no bound
	// tombstone is set when an attempt of this acquisition may still reach
	// the server (its reply was lost): releases then ask the backend to
	// refuse that late copy, which would otherwise take the lock for nobody.
	tombstone bool
	kind      Kind // ref.Kind, for Hooks (observer.go)
	counted   bool // counted in the Client's waitq.Queues.held (a plain lock); set before it is shared
	notify    bool // releases set driver.ReleaseRequest.Notify (Campaign); set before it is shared

	// kept is the lock's place in the lease keeper's schedule, guarded by
	// the keeper (internal/lease; lease.go).
	kept lease.Entry

	mu        sync.Mutex // guards the fields below; see lease.go for the lock order
	renewing  bool       // a renewal (the keeper's or Refresh's) is in flight
	releasing bool       // Release or Close has begun: no renewal starts any more
	signalled bool       // end has run the whenEnded callbacks and closed Done
	yielded   bool       // the release woke another process for its turn (driver.ReleaseResult.Yielded): end leaves the Client's next waiter asleep
	ttl       time.Duration
	unsettled time.Duration // the shortest ttl of a request for this hold whose outcome is unknown; 0: none (lease.go)
	deadline  time.Time     // local lease deadline (lease.go)
	nextRenew time.Time     // when automatic renewal is next due
	turnFree  chan struct{} // made by a Refresh waiting for the renewal turn; closed when it is free
	err       error         // nil while held
	done      chan struct{} // made by the first Done call; nil until then
	onEnd     map[uint64]func(error)
	nextID    uint64
}

func newLock(c *Client, req driver.Request, res driver.Result, autoRenew time.Duration, sent time.Time, tombstone bool) *Lock {
	var unsettled time.Duration
	if tombstone {
		// The attempt still on its way would be a retry, setting the
		// lease to req.TTL from whenever it lands.
		unsettled = req.TTL
	}
	return &Lock{
		unsettled: unsettled,
		client:    c,
		ref:       req.Ref,
		fence:     res.Fence,
		holds:     res.Holds,
		autoRenew: autoRenew,
		tombstone: tombstone,
		ttl:       req.TTL,
		sent:      sent,
		deadline:  c.grantedEnd(sent, req.TTL, res.Validity),
		nextRenew: sent.Add(autoRenew),
	}
}

// Key returns the lock's key as given to the Client, without namespace.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.ref.Key
}

// Token returns the random owner token of this acquisition. The server
// releases and renews the lock only for this token.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.ref.Token
}

// Fence returns the fencing token: positive, and strictly greater than the
// fence of every earlier acquisition of the key (re-entry keeps it). Send it
// with every write to the protected resource, which must refuse a fence
// lower than the largest it has accepted.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Holds returns the lock's hold count right after this acquisition: 1, or
// more when it re-entered a lock its owner already held (see WithOwner).
func (l *Lock) Holds() int {
	if l == nil {
		return 0
	}
	return l.holds
}

// Held reports the local view of the lock: not released, not lost, and its
// local lease deadline not passed. It asks no server: true means "held unless
// the server lost it", which is why writes carry the Fence.
func (l *Lock) Held() bool {
	return l.Err() == nil && !l.isReleasing()
}

func (l *Lock) isReleasing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releasing
}

// closedChan is the Done channel of a nil *Lock, and of a Lock whose end
// was signalled before Done was first called.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done returns a channel that is closed when the lock is released or lost.
// It is closed by the Client's lease keeper at the local lease deadline, or
// earlier, when a call to Err or Held finds the deadline passed.
func (l *Lock) Done() <-chan struct{} {
	if l == nil {
		return closedChan
	}
	// Made on demand: most held locks are never asked (Do and Context use
	// whenEnded), and a channel is a fifth of a held lock's memory.
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		if l.signalled {
			return closedChan
		}
		l.done = make(chan struct{})
	}
	return l.done
}

// Err returns nil while the lock is held, then an error matching ErrReleased
// (released by its holder, or by Close: then it matches ErrClosed too) or
// ErrLost (renewal found it gone, or the local lease deadline passed). It
// reads the clock: once the deadline has passed it reports ErrLost, even if
// the lease keeper has not yet run.
func (l *Lock) Err() error {
	if l == nil {
		return errNilLock
	}
	l.mu.Lock()
	err, expired := l.err, l.expiredLocked(time.Now())
	l.mu.Unlock()
	if expired {
		l.expire()
		l.mu.Lock()
		err = l.err
		l.mu.Unlock()
	}
	return err
}

// Deadline returns the local lease deadline: the time before which the lease
// is certain to be in force on the server, less the safety margin (it is
// measured from before the request that acquired or last renewed the lock).
func (l *Lock) Deadline() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// TTL asks the server for the lock's remaining lease. It returns an error
// matching ErrNotHeld when the server no longer holds it for this token, and
// one matching ErrUnavailable when the server could not be asked.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, errNilLock
	}
	if ctx == nil {
		return 0, errNilContext
	}
	defer l.client.ops.begin()()
	if err := l.Err(); err != nil {
		return 0, lockError("ttl", l.ref.Key, fmt.Errorf("%w: %w", ErrNotHeld, err))
	}
	start := time.Now()
	ttl, err := l.client.store.TTL(ctx, l.ref)
	switch {
	case errors.Is(err, ErrNotHeld):
		return 0, lockError("ttl", l.ref.Key, err)
	case err != nil:
		return 0, l.client.unavailable(ctx, "ttl", l.ref.Key, 1, start, err)
	}
	return ttl, nil
}

// Refresh sets the lock's lease to ttl from now, as measured by the server,
// and makes ttl the lease of later automatic renewals. It never re-creates a
// lock that has lapsed: then it returns an error matching ErrNotHeld and the
// Lock is lost. It waits for an automatic renewal in flight, so that the last
// renewal sent sets both the server's lease and the local deadline. When the
// server cannot be reached it returns an error matching ErrUnavailable; the
// lock then stays held until its current deadline unless a renewal succeeds,
// or, when the request may have reached the server, until the deadline the
// new ttl would give, if that is earlier. That earlier deadline applies from
// the moment the request is sent: while it is in flight, Deadline, Err and
// Done already count with the shorter lease it may set. A request whose
// outcome is unknown (a renewal that failed that way, or an attempt of the
// acquisition whose reply never came) may also land later, after a longer
// ttl was granted, and set the lease back to its own ttl: from then on the
// local deadline counts no renewal of this Lock as longer than that ttl.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return errNilLock
	}
	if ctx == nil {
		return errNilContext
	}
	defer l.client.ops.begin()()
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if l.autoRenew > 0 {
		if local := l.client.localLease(ttl); l.autoRenew >= local {
			return invalid("ttl", ttl, fmt.Sprintf("must leave a local lease (%v) longer than the renewal interval %v", local, l.autoRenew))
		}
	}
	// Take the renewal turn, as the lease keeper does for a batch.
	l.mu.Lock()
	for l.renewing && l.err == nil && !l.releasing {
		inflight := l.renewalTurnLocked()
		l.mu.Unlock()
		select {
		case <-inflight:
		case <-ctx.Done():
			return l.client.unavailable(ctx, "refresh", l.ref.Key, 0, time.Now(), ctx.Err())
		}
		l.mu.Lock()
	}
	ended := l.err
	if ended == nil && l.expiredLocked(time.Now()) {
		l.mu.Unlock()
		l.expire()
		return lockError("refresh", l.ref.Key, fmt.Errorf("%w: %w", ErrNotHeld, l.Err()))
	}
	if ended != nil || l.releasing {
		l.mu.Unlock()
		if ended == nil {
			ended = ErrReleased
		}
		return lockError("refresh", l.ref.Key, fmt.Errorf("%w: %w", ErrNotHeld, ended))
	}
	l.beginRenewalLocked()
	l.ttl = ttl
	before := l.deadline
	// From the moment the request is sent the server may apply it, and a
	// shorter ttl ends the lease sooner: until a reply says otherwise, the
	// lock is held no longer than the new lease allows, so that a reply
	// that is late cannot leave the holder believing past the lease's end.
	sent := now()
	l.deadline = earliest(before, l.client.leaseEnd(sent, ttl))
	deadline := l.deadline
	l.mu.Unlock()
	if deadline.Before(before) {
		l.client.leases.Reschedule(&l.kept)
	}

	res, err := l.sendRefresh(ctx, ttl, deadline)
	if errors.Is(err, ErrNotSent) {
		// Not applied: the lease it had still holds.
		l.mu.Lock()
		if l.err == nil && !l.releasing {
			l.deadline = latestOf(l.deadline, before)
		}
		l.mu.Unlock()
	}
	l.finishRenewal(sent, ttl, res)
	l.client.leases.Reschedule(&l.kept)
	switch {
	case res.Err != nil:
		return l.client.unavailable(ctx, "refresh", l.ref.Key, 1, sent, res.Err)
	case !res.Held:
		return lockError("refresh", l.ref.Key, fmt.Errorf("%w: %w", ErrNotHeld, ErrLost))
	default:
		return nil
	}
}

// sendRefresh sends Refresh's renewal, bounded by deadline: a reply after
// it comes too late, the lock will have been declared lost by then. It
// returns the renewal's result, and err, the request's own error (res.Err
// then too).
func (l *Lock) sendRefresh(ctx context.Context, ttl time.Duration, deadline time.Time) (res driver.RenewResult, err error) {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := rctx.Err(); err != nil {
		err = fmt.Errorf("%w: %w", ErrNotSent, err)
		return driver.RenewResult{Err: err}, err
	}
	results, err := l.client.store.Renew(rctx, []driver.RenewRequest{{Ref: l.ref, TTL: ttl}})
	if err == nil && len(results) != 1 {
		err = fmt.Errorf("backend returned %d results for 1 renewal", len(results))
	}
	if err != nil {
		return driver.RenewResult{Err: err}, err
	}
	return results[0], nil
}

// Context returns a copy of ctx that is cancelled when the lock ends: with
// cause ErrLost (context.Cause) the moment ownership is lost, or with the
// lock's ErrReleased error when it is released. Call cancel when done. It
// panics when ctx is nil, as context.WithCancel does.
func (l *Lock) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	mustContext("Lock.Context", ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	if l == nil {
		cancel(errNilLock)
		return ctx, func() {}
	}
	stop := l.whenEnded(func(err error) { cancel(err) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// whenEnded runs f (once, with the lock's Err) when the lock is released or
// lost; at once if it already is. The returned func unregisters f.
func (l *Lock) whenEnded(f func(error)) (stop func()) {
	if err := l.Err(); err != nil { // also ends a lock whose deadline has passed
		f(err)
		return func() {}
	}
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		f(err)
		return func() {}
	}
	if l.onEnd == nil {
		l.onEnd = make(map[uint64]func(error))
	}
	id := l.nextID
	l.nextID++
	l.onEnd[id] = f
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.onEnd, id)
		l.mu.Unlock()
	}
}

// expire ends a lock whose local deadline passed without a successful
// renewal. The server may still count its hold (its lease ends a margin
// later, or other holds of the same owner keep the lock alive), so a release
// is sent in the background: the key is freed as soon as possible, and a
// lapsed re-entrant hold is not left counted.
func (l *Lock) expire() {
	if l.maxHoldPassed() {
		l.loseWith(fmt.Errorf("%w: %w (%v)", ErrLost, ErrMaxHoldExceeded, l.maxHold),
			lostMaxHold, fmt.Sprintf("held for its maximum of %v (WithMaxHold)", l.maxHold), true)
		return
	}
	l.lose(lostDeadline, "the lease deadline passed without a successful renewal", true)
}

// lose ends the lock with ErrLost, logging why. With release, or when a late
// acquire copy may still arrive, the hold is released in the background.
func (l *Lock) lose(why string, reason string, release bool) {
	l.loseWith(fmt.Errorf("%w: %s", ErrLost, reason), why, reason, release)
}

// loseWith is lose with the lock's error given: err must match ErrLost.
func (l *Lock) loseWith(err error, why string, reason string, release bool) {
	if !l.end(err) {
		return
	}
	l.client.log.Warn("fencelock: lock lost", "key", l.ref.Key, "fence", l.fence,
		"token", shortToken(l.ref.Token), "reason", reason)
	l.noteLost(why)
	if release || l.tombstone {
		l.client.releaser.add(l.releaseRequest(), l.ttl)
	}
}

// end records how the lock ended, closes Done and runs the whenEnded
// callbacks. Only the first call has an effect; it reports whether it was it.
func (l *Lock) end(err error) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	callbacks := l.onEnd
	l.onEnd = nil
	yielded := l.yielded
	l.mu.Unlock()

	// Contexts first: whoever sees Done closed also finds every context
	// from Context and Do cancelled with the cause. (Done may be made
	// meanwhile: it is read after the callbacks.)
	for _, f := range callbacks {
		f(err)
	}
	l.mu.Lock()
	l.signalled = true
	done := l.done
	l.mu.Unlock()
	if done != nil {
		close(done)
	}
	l.client.leases.Remove(&l.kept)
	if l.counted {
		// After a release that yielded to another process, this Client's
		// next waiter waits to be woken for its own turn.
		l.client.queues.Ended(l.ref.Key, !yielded)
	}
	return true
}

// held is how long ago l's acquiring request was sent.
func (l *Lock) held() time.Duration { return time.Since(l.sent) }

// endReleased ends l as released (err matches ErrReleased) and reports it,
// unless it had already ended. ctx is the releasing call's.
func (l *Lock) endReleased(ctx context.Context, err error) {
	if !l.end(err) {
		return
	}
	if h := l.client.hooks.Released; h != nil {
		h(ctx, ReleaseEvent{Key: l.ref.Key, Kind: l.kind, Fence: l.fence, Held: l.held()})
	}
}

// noteLost reports the loss of l.
func (l *Lock) noteLost(reason string) {
	if h := l.client.hooks.Lost; h != nil {
		h(LostEvent{Key: l.ref.Key, Kind: l.kind, Fence: l.fence, Reason: reason, Held: l.held()})
	}
}
