package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lock is one acquisition of a lock. Its methods are safe for concurrent
// use. Release it when done (Do does that for you); a Lock that is lost or
// released stays so.
//
// A lease guarantees mutual exclusion only while the holder is running and
// in touch with the server. A process that is paused (GC, SIGSTOP, swap) or
// cut off can go on believing it holds the lock after its lease has ended
// and another process has taken it. Pass Fence to the protected resource and
// let the resource reject writes with a fence lower than one it has already
// accepted: that check is what makes a late write harmless.
type Lock struct {
	client    *Client
	ref       LockRef
	fence     int64
	holds     int
	autoRenew time.Duration // 0: no automatic renewal

	mu        sync.Mutex
	ttl       time.Duration
	deadline  time.Time     // local lease deadline, monotonic, from before the request that set it
	nextRenew time.Time     // when automatic renewal is next due
	renewing  chan struct{} // non-nil while a renewal is in flight; closed when it ends
	releasing bool          // Release was called: no renewal starts any more
	err       error         // nil while held
	done      chan struct{}
	onEnd     map[uint64]func(error)
	nextID    uint64
}

func newLock(c *Client, ref LockRef, res AcquireResult, ttl, autoRenew time.Duration, sent time.Time) *Lock {
	return &Lock{
		client:    c,
		ref:       ref,
		fence:     res.Fence,
		holds:     res.Holds,
		autoRenew: autoRenew,
		ttl:       ttl,
		deadline:  leaseEnd(sent, ttl),
		nextRenew: sent.Add(autoRenew),
		done:      make(chan struct{}),
	}
}

// leaseEnd is the local deadline of a lease of ttl granted by a request sent
// at sent. The server counts the lease from when it handles the request, so
// its lease ends later; a thousandth of the ttl is taken off as well, for a
// server clock that runs faster than ours (clock rates differ by far less).
func leaseEnd(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - ttl/1000)
}

// Key returns the lock's key as given to the Client, without namespace.
func (l *Lock) Key() string { return l.ref.Key }

// Token returns the random owner token of this acquisition. The server
// releases and renews the lock only for this token.
func (l *Lock) Token() string { return l.ref.Token }

// Fence returns the fencing token: positive, and strictly greater than the
// fence of every earlier acquisition of the key (re-entry keeps it). Send it
// with every write to the protected resource, which must refuse a fence
// lower than the largest it has accepted.
func (l *Lock) Fence() int64 { return l.fence }

// Holds returns the lock's hold count right after this acquisition: 1, or
// more when it re-entered a lock its owner already held (see WithOwner).
func (l *Lock) Holds() int { return l.holds }

// Held reports the local view of the lock: not released, not lost, and its
// local lease deadline not passed. It asks no server: true means "held unless
// the server lost it", which is why writes carry the Fence.
func (l *Lock) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err == nil && !l.releasing && time.Now().Before(l.deadline)
}

// Done returns a channel that is closed when the lock is released or lost.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Err returns nil while the lock is held, then an error matching ErrReleased
// (released by its holder, or by Close: then it matches ErrClosed too) or
// ErrLost (renewal found it gone, or the lease deadline passed).
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Deadline returns the local lease deadline: the time before which the lease
// is certain to be in force on the server (it is measured from before the
// request that acquired or last renewed the lock).
func (l *Lock) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// TTL asks the server for the lock's remaining lease. It returns an error
// matching ErrNotHeld when the server no longer holds it for this token.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	defer l.client.ops.begin()()
	if err := l.Err(); err != nil {
		return 0, lockError("ttl", l.ref.Key, errors.Join(ErrNotHeld, err))
	}
	ttl, err := l.client.backend.TTL(ctx, l.ref)
	if err != nil {
		return 0, lockError("ttl", l.ref.Key, err)
	}
	return ttl, nil
}

// Refresh sets the lock's lease to ttl from now, as measured by the server,
// and makes ttl the lease of later automatic renewals. It never re-creates a
// lock that has lapsed: then it returns an error matching ErrNotHeld and the
// Lock is lost. It waits for an automatic renewal in flight, so that the last
// renewal sent sets both the server's lease and the local deadline.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	defer l.client.ops.begin()()
	if ttl < time.Millisecond {
		return invalid("ttl", ttl, "must be at least 1ms")
	}
	if l.autoRenew > 0 && ttl <= l.autoRenew {
		return invalid("ttl", ttl, "must be longer than the renewal interval "+l.autoRenew.String())
	}
	// Take the renewal turn, as the lease keeper does for a batch.
	l.mu.Lock()
	for l.renewing != nil && l.err == nil && !l.releasing {
		inflight := l.renewing
		l.mu.Unlock()
		select {
		case <-inflight:
		case <-ctx.Done():
			return lockError("refresh", l.ref.Key, ctx.Err())
		}
		l.mu.Lock()
	}
	if ended := l.err; ended != nil {
		l.mu.Unlock()
		return lockError("refresh", l.ref.Key, errors.Join(ErrNotHeld, ended))
	}
	if l.releasing {
		l.mu.Unlock()
		return lockError("refresh", l.ref.Key, errors.Join(ErrNotHeld, ErrReleased))
	}
	l.renewing = make(chan struct{})
	l.ttl = ttl
	l.mu.Unlock()

	sent := now()
	results, err := l.client.backend.Renew(ctx, []RenewRequest{{LockRef: l.ref, TTL: ttl}})
	if err == nil && len(results) != 1 {
		err = fmt.Errorf("backend returned %d results for 1 renewal", len(results))
	}
	res := RenewResult{Err: err}
	if err == nil {
		res = results[0]
	}
	l.finishRenewal(sent, ttl, res)
	l.client.leases.reschedule(l)
	switch {
	case res.Err != nil:
		return lockError("refresh", l.ref.Key, res.Err)
	case !res.Held:
		return lockError("refresh", l.ref.Key, errors.Join(ErrNotHeld, ErrLost))
	default:
		return nil
	}
}

// Release gives the lock up: it stops renewal (waiting for a renewal in
// flight), deletes the hold on the server if this token still has it, and
// wakes waiters. When ctx is already done, it releases on a detached context
// bounded to a few seconds, so that a cancelled caller does not leave the key
// locked until its lease ends.
//
// Release is idempotent: later calls return nil. It returns an error matching
// ErrNotHeld when the server no longer held the lock for this token (the
// Lock is then lost, if it was not already), and the server's error when the
// release could not be sent (the lease then lapses on the server).
func (l *Lock) Release(ctx context.Context) error { return l.release(ctx, nil) }

// release implements Release; cause, when not nil, is added to ErrReleased
// (Close passes ErrClosed).
func (l *Lock) release(ctx context.Context, cause error) error {
	defer l.client.ops.begin()()
	l.mu.Lock()
	if l.releasing {
		l.mu.Unlock()
		return nil
	}
	l.releasing = true
	inflight := l.renewing
	l.mu.Unlock()
	l.client.leases.remove(l)

	ctx, cancel := l.client.detached(ctx)
	defer cancel()
	if inflight != nil {
		select {
		case <-inflight:
		case <-ctx.Done():
		}
	}

	released := ErrReleased
	if cause != nil {
		released = fmt.Errorf("%w: %w", ErrReleased, cause)
	}
	log := l.client.log
	res, err := l.client.backend.Release(ctx, ReleaseRequest{LockRef: l.ref})
	switch {
	case err != nil:
		l.end(released)
		log.Warn("fencelock: release failed; the lease will lapse on the server",
			"key", l.ref.Key, "fence", l.fence, "token", shortToken(l.ref.Token), "error", err)
		return lockError("release", l.ref.Key, err)
	case !res.Held:
		log.Warn("fencelock: release skipped: not owner (the lock had expired or was taken over)",
			"key", l.ref.Key, "fence", l.fence, "token", shortToken(l.ref.Token))
		l.lose("the lock was no longer held when released")
		return lockError("release", l.ref.Key, ErrNotHeld)
	default:
		l.end(released)
		if res.Remaining == 0 {
			l.client.queues.released(l.ref.Key)
		}
		log.Debug("fencelock: released", "key", l.ref.Key, "fence", l.fence,
			"token", shortToken(l.ref.Token), "holds_left", res.Remaining)
		return nil
	}
}

// Context returns a copy of ctx that is cancelled when the lock ends: with
// cause ErrLost (context.Cause) the moment ownership is lost, or with the
// lock's ErrReleased error when it is released. Call cancel when done.
func (l *Lock) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := l.whenEnded(func(err error) { cancel(err) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// whenEnded runs f (once, with the lock's Err) when the lock is released or
// lost; at once if it already is. The returned func unregisters f.
func (l *Lock) whenEnded(f func(error)) (stop func()) {
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

// lose ends the lock with ErrLost, logging why.
func (l *Lock) lose(reason string) {
	if l.end(fmt.Errorf("%w: %s", ErrLost, reason)) {
		l.client.log.Warn("fencelock: lock lost", "key", l.ref.Key, "fence", l.fence,
			"token", shortToken(l.ref.Token), "reason", reason)
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
	l.mu.Unlock()

	close(l.done)
	l.client.leases.remove(l)
	for _, f := range callbacks {
		f(err)
	}
	return true
}
