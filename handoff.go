package fencelock

import (
	"context"
	"errors"
	"time"
)

// HandOffBackend is implemented by backends whose release can hand the lock
// it frees to another acquire request in the same atomic step. A Client
// uses it for its own goroutines: when one releases a lock that another
// goroutine of the same Client waits for (the next in the Client's line for
// the key), one request releases the lock and takes it for the waiter. The
// hand-off then costs one round trip, where a release, a wake-up and the
// waiter's acquire cost two and a goroutine switch in between. A waiter
// that acquires for an owner (WithOwner, Campaign, RunJob) is not handed
// the lock, which would be its token's alone: the release wakes it, and it
// takes the lock with an attempt of its own.
//
// So that a Client's goroutines never keep the lock from other processes,
// the store hands the lock over only when no acquire was refused while it
// was held: a waiter of another process makes an attempt, and is refused,
// before it waits, so a refusal means someone else may be waiting. The
// release then frees the lock and wakes the waiters as Release does, and
// the Client's next waiter takes its chance with the others. A store that
// lines up the waiting processes (the Redis backend) may instead hand the
// lock on a few times in a row during the releasing process's turn, and
// then wake the next process in line (ReleaseResult.Yielded): the other
// processes still get the lock after a bounded number of holds.
//
// The Redis backend implements it (except with replica acknowledgement,
// where it releases only); fencelocktest checks it.
type HandOffBackend interface {
	// ReleaseHandOff is Release of req and, when that frees the lock (no
	// hold is left) and no acquire was refused while it was held, Acquire
	// of next in the same atomic step: a new acquisition as Acquire makes
	// one (a fence above every earlier one and next.FenceFloor, a lease of
	// next.TTL counted by the store from then, refused if next.Token has a
	// tombstone). next names the same lock as req, with Owner equal to its
	// Token. When the lock is not handed over, the AcquireResult has
	// Acquired false and the release wakes waiters as Release does. An
	// error means that the request may or may not have been applied, as
	// for every call.
	ReleaseHandOff(ctx context.Context, req ReleaseRequest, next AcquireRequest) (ReleaseResult, AcquireResult, error)
}

// handedLock is a lock a release by this Client handed to one of its
// waiters (HandOffBackend).
type handedLock struct {
	res AcquireResult
	// sent is when the release request was sent: the store began the
	// waiter's lease after that, so the waiter's local deadline counts
	// from it.
	sent time.Time
}

// releaseHandingOff sends one release request of req that hands the lock,
// if it frees it, to the waiter at place p (see waitQueues.offer), and
// settles the offer: the waiter gets the lock, or learns that its token may
// hold it (an error: the request may have been applied), or nothing.
func (c *Client) releaseHandingOff(ctx context.Context, req ReleaseRequest, p *place) (ReleaseResult, error) {
	next := p.req
	next.FenceFloor = c.maxFence.Load()
	sent := now()
	res, got, err := c.handOff.ReleaseHandOff(ctx, req, next)
	switch {
	case err == nil && got.Acquired:
		c.queues.settle(p, &handedLock{res: got, sent: sent}, false)
	case err == nil || errors.Is(err, ErrNotSent) || errors.Is(err, ErrInvalidArgument):
		c.queues.settle(p, nil, false)
	default:
		c.queues.settle(p, nil, true)
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
	if w.c.queues.takeUnsure(w.place) {
		w.ambiguous = true // a release that may have handed us the lock failed
	}
	var h handedLock
	select {
	case h = <-w.place.handed:
	default:
		return nil
	}
	if !now().Before(w.c.grantedEnd(h.sent, w.req.TTL, h.res.Validity)) {
		w.ambiguous = true
		return nil
	}
	lk, err := w.c.hold(w.req, w.cfg, h.res, h.sent, w.ambiguous)
	if err != nil {
		// Closing: the hold stays on the store; giving up releases it.
		w.ambiguous = true
		return nil
	}
	return lk
}
