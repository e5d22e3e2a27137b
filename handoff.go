package fencelock

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// handedLock is a lock a release by this Client handed to one of its
// waiters (driver.Lines.HandOff).
type handedLock struct {
	res driver.Result
	// sent is when the release request was sent: the store began the
	// waiter's lease after that, so the waiter's local deadline counts
	// from it.
	sent time.Time
}

// releaseHandingOff sends one release request of req that hands the lock,
// if it frees it, to the waiter at place p (see waitQueues.offer), and
// settles the offer: the waiter gets the lock, or learns that its token may
// hold it (an error: the request may have been applied), or nothing.
func (c *Client) releaseHandingOff(ctx context.Context, req driver.ReleaseRequest, p *place) (driver.ReleaseResult, error) {
	next := p.req
	next.FenceFloor = c.maxFence.Load()
	sent := now()
	res, got, err := c.lines.HandOff(ctx, req, next)
	if errors.Is(err, ErrUnsupported) {
		// The store never hands a lock over, and sent nothing: release
		// alone, now and from now on.
		c.noHandOff.Store(true)
		c.queues.settle(p, nil, false)
		return c.store.Release(ctx, req)
	}
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
