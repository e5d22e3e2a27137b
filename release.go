package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/waitq"
)

// tombstoneLife is how long the backend refuses an acquire with a token
// whose earlier acquire request may still be on its way (its reply was
// lost). It must outlast the delivery of a request that the network or a
// paused server holds back; it costs one small key per such token.
const tombstoneLife = 10 * time.Minute

// releaseAttemptTimeout bounds one release request, so that a server that
// does not answer (paused, partitioned) holds no caller for long: the
// release is then retried in the background.
const releaseAttemptTimeout = time.Second

// releaseAttempts is how many release requests Release makes before it
// hands the release over to the background: the second learns whether the
// first, whose reply was lost, was applied.
const releaseAttempts = 2

// Release gives the lock up: it stops renewal, deletes the hold on the
// server if this token still has it, and wakes waiters. It does not wait for
// a renewal in flight (a renewal that arrives after the release finds
// nothing to renew). When ctx is already done, it releases on a detached
// context bounded to a few seconds, so that a cancelled caller does not leave
// the key locked until its lease ends.
//
// Release returns nil when the server released the hold, also when a first
// request's reply was lost and a second one found the hold already gone. It
// returns an error matching ErrNotHeld when the server no longer held the
// lock for this token (the Lock is then lost, if it was not already), and
// one matching ErrUnavailable when the release could not be confirmed: the
// Client then goes on releasing in the background until the server answers
// (or the Client is closed), and the lease lapses on the server at the
// latest. When the backend refused the client (ErrMisconfigured), it
// returns that error and nothing is retried: the lease lapses on the
// server. Either way the Lock counts as released. Later calls return nil,
// or the lock's error if Close released it.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return errNilLock
	}
	if ctx == nil {
		return errNilContext
	}
	return l.release(ctx, nil)
}

// release implements Release; cause, when not nil, is added to ErrReleased
// (Close passes ErrClosed).
func (l *Lock) release(ctx context.Context, cause error) error {
	c := l.client
	defer c.ops.begin()()
	l.mu.Lock()
	switch {
	case l.releasing:
		err := l.err
		l.mu.Unlock()
		if errors.Is(err, ErrClosed) && cause == nil {
			return lockError("release", l.ref.Key, err) // Close released it
		}
		return nil
	case l.err != nil || l.expiredLocked(time.Now()):
		// Lost: the lease keeper (or expire) has the release in hand.
		l.releasing = true
		l.mu.Unlock()
		l.expire()
		return lockError("release", l.ref.Key, fmt.Errorf("%w: %w", ErrNotHeld, l.Err()))
	}
	l.releasing = true
	heldUntil := l.deadline
	l.mu.Unlock()
	c.leases.Remove(&l.kept)

	released := ErrReleased
	if cause != nil {
		released = fmt.Errorf("%w: %w", ErrReleased, cause)
	}
	var offer *waitq.Place // the waiter of this Client that the release may hand the lock to
	if l.kind == KindLock && c.lines != nil && !c.closed() {
		offer = c.queues.Offer(l.ref.Key)
	}
	res, err := c.sendReleaseTo(ctx, l.releaseRequest(), heldUntil, offer)
	switch {
	case errors.Is(err, ErrMisconfigured):
		// A retry would be refused too: the hold lapses on the server.
		l.endReleased(ctx, released)
		c.log.Warn("fencelock: release refused; the hold will lapse on the server",
			"key", l.ref.Key, "fence", l.fence, "token", shortToken(l.ref.Token), "error", err)
		return err
	case err != nil:
		l.endReleased(ctx, released)
		c.log.Warn("fencelock: release not confirmed; retrying in the background",
			"key", l.ref.Key, "fence", l.fence, "token", shortToken(l.ref.Token), "error", err)
		c.releaser.add(l.releaseRequest(), l.ttl)
		return err
	case !res.Held:
		c.log.Warn("fencelock: release skipped: not owner (the lock had expired or was taken over)",
			"key", l.ref.Key, "fence", l.fence, "token", shortToken(l.ref.Token))
		l.lose(lostGone, "the lock was no longer held when released", false)
		return lockError("release", l.ref.Key, ErrNotHeld)
	default:
		if res.Yielded {
			l.mu.Lock()
			l.yielded = true
			l.mu.Unlock()
		}
		l.endReleased(ctx, released)
		if res.Remaining == 0 && l.kind == KindLock && !res.Yielded {
			c.queues.Released(l.ref.Key)
		}
		if c.debugEnabled() {
			c.log.Debug("fencelock: released", "key", l.ref.Key, "fence", l.fence,
				"token", shortToken(l.ref.Token), "holds_left", res.Remaining)
		}
		return nil
	}
}

// releaseRequest is the request that gives up l's hold.
func (l *Lock) releaseRequest() driver.ReleaseRequest {
	req := driver.ReleaseRequest{Ref: l.ref, Notify: l.notify}
	if l.tombstone {
		req.Tombstone = tombstoneLife
	}
	return req
}

// sendReleaseTo makes up to releaseAttempts release requests, each bounded
// by releaseAttemptTimeout, within ctx (or a detached, bounded context when
// ctx is done). heldUntil is the local deadline of the hold when the first
// request was sent: a later request that finds the hold gone, after one
// whose reply was lost, means that one was applied, since the lease cannot
// have ended before heldUntil. The first request hands the lock, if it frees
// it, to the waiter at offer (nil: none; see releaseHandingOff), a second
// one only releases.
func (c *Client) sendReleaseTo(ctx context.Context, req driver.ReleaseRequest, heldUntil time.Time, offer *waitq.Place) (driver.ReleaseResult, error) {
	ctx, cancel := c.detached(ctx)
	defer cancel()
	start := time.Now()
	mayHaveApplied := false
	var lastErr error
	for try := 1; try <= releaseAttempts; try++ {
		sent := now()
		actx, acancel := boundBy(ctx, time.Now().Add(releaseAttemptTimeout), nil)
		var res driver.ReleaseResult
		var err error
		if offer != nil {
			res, err = c.releaseHandingOff(actx, req, offer)
			offer = nil
		} else {
			res, err = c.store.Release(actx, req)
		}
		acancel()
		if err == nil {
			if !res.Held && mayHaveApplied {
				res.Held = true // the earlier request released it
			}
			return res, nil
		}
		if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrUnsupported) {
			return res, lockError("release", req.Key, err)
		}
		lastErr = err
		if errors.Is(err, ErrMisconfigured) {
			break // refused: a second request would be too
		}
		if !errors.Is(err, ErrNotSent) && sent.Before(heldUntil) {
			mayHaveApplied = true
		}
		if ctx.Err() != nil {
			break
		}
	}
	return driver.ReleaseResult{}, c.unavailable(ctx, "release", req.Key, releaseAttempts, start, lastErr)
}

// releaser finishes releases that could not be confirmed when they were
// made (the server could not be reached), and releases the holds of locks
// that were lost or of acquires whose replies were lost. One goroutine per
// Client, started when there is work and ending when there is none, sends
// them one at a time: while the server fails, it probes with one request
// and backs off; once the server answers, it goes through the rest quickly.
// Each release is retried until the server answers, for at least a minute
// and twice its lease; Close gives them its release timeout. A release the
// backend refuses for the client's configuration (ErrMisconfigured) is
// dropped at once: every retry would be refused.
type releaser struct {
	c *Client

	mu      sync.Mutex
	pending []pendingRelease
	running bool // the goroutine is running
	ctx     context.Context
	cancel  context.CancelFunc
	idle    chan struct{} // closed when the goroutine exits; replaced when it starts
}

// pendingRelease is one release to retry until the server answers, or until
// giveUp.
type pendingRelease struct {
	req    driver.ReleaseRequest
	giveUp time.Time
}

// maxPendingReleases caps the background releases a Client keeps during a
// long outage; beyond it the oldest are dropped (their leases lapse on the
// server, as they would have by the time so many were queued).
const maxPendingReleases = 100_000

// releaseBackoff bounds the pause between release retries.
const (
	minReleaseBackoff = 10 * time.Millisecond
	maxReleaseBackoff = time.Second
)

func newReleaser(c *Client) *releaser {
	r := &releaser{c: c, idle: make(chan struct{})}
	close(r.idle)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// add queues a release of a hold (of req.Kind) with lease ttl.
func (r *releaser) add(req driver.ReleaseRequest, ttl time.Duration) {
	giveUp := time.Now().Add(max(2*ttl, time.Minute))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		r.c.log.Warn("fencelock: client closed; the hold will lapse on the server",
			"key", req.Key, "token", shortToken(req.Token))
		return
	}
	if len(r.pending) >= maxPendingReleases {
		dropped := r.pending[0]
		r.pending = r.pending[1:]
		r.c.log.Warn("fencelock: too many releases pending; dropped the oldest, whose hold will lapse on the server",
			"key", dropped.req.Key, "token", shortToken(dropped.req.Token))
	}
	r.pending = append(r.pending, pendingRelease{req: req, giveUp: giveUp})
	if !r.running {
		r.running = true
		r.idle = make(chan struct{})
		go r.run(r.idle)
	}
}

// run sends the pending releases until none is left.
func (r *releaser) run(idle chan struct{}) {
	defer close(idle)
	backoff := minReleaseBackoff
	for {
		r.mu.Lock()
		if len(r.pending) == 0 || r.ctx.Err() != nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		p := r.pending[0]
		r.pending = r.pending[1:]
		r.mu.Unlock()

		ctx, cancel := context.WithTimeout(r.ctx, releaseAttemptTimeout)
		res, err := r.c.store.Release(ctx, p.req)
		cancel()
		log := r.c.log
		switch {
		case err == nil:
			backoff = minReleaseBackoff
			if res.Held {
				log.Info("fencelock: released in the background", "key", p.req.Key, "token", shortToken(p.req.Token))
				if res.Remaining == 0 && p.req.Kind == KindLock && !res.Yielded {
					r.c.queues.Released(p.req.Key)
				}
			}
			continue
		case errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrMisconfigured) || time.Now().After(p.giveUp):
			log.Warn("fencelock: gave up a background release; the hold will lapse on the server",
				"key", p.req.Key, "token", shortToken(p.req.Token), "error", err)
			continue
		}
		r.mu.Lock()
		r.pending = append(r.pending, p) // try again, after the others
		r.mu.Unlock()
		select {
		case <-time.After(backoff):
		case <-r.ctx.Done():
		}
		backoff = min(2*backoff, maxReleaseBackoff)
	}
}

// close waits up to timeout for the pending releases, then abandons those
// left (their leases lapse on the server) and waits for the goroutine. It
// returns an error when some were abandoned.
func (r *releaser) close(timeout time.Duration) error {
	timeUp := time.After(timeout)
	for waiting := true; waiting; {
		r.mu.Lock()
		idle, running := r.idle, r.running
		r.mu.Unlock()
		if !running {
			break
		}
		select {
		case <-idle: // look again: a lock lost meanwhile may have added work
		case <-timeUp:
			waiting = false
		}
	}
	r.mu.Lock()
	left := len(r.pending)
	if r.running {
		left++ // the one in flight
	}
	r.cancel()
	idle := r.idle
	r.mu.Unlock()
	<-idle
	if left > 0 {
		return fmt.Errorf("fencelock: up to %d releases not confirmed within %v; their leases will lapse on the server", left, timeout)
	}
	return nil
}

// releaseHandingOff sends one release request of req that hands the lock,
// if it frees it, to the waiter at place p (see waitq.Queues.Offer), and
// settles the offer: the waiter gets the lock, or learns that its token may
// hold it (an error: the request may have been applied), or nothing.
func (c *Client) releaseHandingOff(ctx context.Context, req driver.ReleaseRequest, p *waitq.Place) (driver.ReleaseResult, error) {
	next := p.Req
	next.FenceFloor = c.maxFence.Load()
	sent := now()
	res, got, err := c.lines.HandOff(ctx, req, next)
	switch {
	case err == nil && got.Acquired:
		c.queues.Settle(p, &waitq.Handed{Res: got, Sent: sent}, false)
	case err == nil || errors.Is(err, ErrNotSent) || errors.Is(err, ErrInvalidArgument):
		c.queues.Settle(p, nil, false)
	default:
		c.queues.Settle(p, nil, true)
	}
	return res, err
}

// handedOver returns the Lock a release by this Client handed to the
// waiter, or nil when there is none or its lease has passed locally (the
// store may still hold it for the waiter's token: the next attempt, a
// retry, completes it).
func (w *waiter) handedOver() *Lock {
	if w.place == nil {
		return nil
	}
	if w.c.queues.TakeUnsure(w.place) {
		w.ambiguous = true // a release that may have handed us the lock failed
	}
	var h waitq.Handed
	select {
	case h = <-w.place.Handed:
	default:
		return nil
	}
	if !now().Before(w.c.grantedEnd(h.Sent, w.req.TTL, h.Res.Validity)) {
		w.ambiguous = true
		return nil
	}
	lk, err := w.c.hold(w.req, w.cfg, h.Res, h.Sent, w.ambiguous)
	if err != nil {
		// Closing: the hold stays on the store; giving up releases it.
		w.ambiguous = true
		return nil
	}
	return lk
}
