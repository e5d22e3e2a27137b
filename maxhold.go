package fencelock

import (
	"errors"
	"time"
)

// ErrMaxHoldExceeded is the cause of the loss of a lock that was held for
// the whole of its WithMaxHold bound. The lock's Err (and the cause of its
// Context and of Do's context) matches both it and ErrLost.
var ErrMaxHoldExceeded = errors.New("fencelock: maximum hold time exceeded")

// WithMaxHold bounds how long the lock may be held, renewals included: d
// after the acquiring request was sent, the lease keeper stops renewing it
// and the lock is lost. Done is closed, Err matches ErrLost and
// ErrMaxHoldExceeded, the contexts of Context and Do are cancelled with that
// error, and the hold is released on the server at once (in the
// background), so that waiters need not sit out the rest of its lease. A
// stuck task can thus never keep a lock for longer than d, however it is
// renewed (WithAutoRenew, Do, Refresh).
//
// Releasing at once is the choice that matters for the others: a holder
// that is stuck does not stop when its context is cancelled, whether the
// lease is released now or runs out a ttl later, and a holder that does
// stop needs no more time. Any write it still makes is refused by the
// fencing token (Fence), exactly as after any other loss.
//
// d must be at least MinTTL. It may be shorter than the ttl: the lock
// is then lost after d, like a lease that ran out early.
func WithMaxHold(d time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.maxHold, c.maxHoldSet = d, true }
}

// limitHold applies WithMaxHold to a lock: its local deadline never goes
// past d after the acquiring request was sent. It runs before the lock is
// shared with the lease keeper.
func (l *Lock) limitHold(d time.Duration) {
	if d <= 0 {
		return
	}
	l.maxHold = d
	l.deadline = earliest(l.deadline, l.holdEnd())
}

// holdEnd is when WithMaxHold ends the lock (l.maxHold > 0): the local
// deadline never goes past it.
func (l *Lock) holdEnd() time.Time { return l.sent.Add(l.maxHold) }

// boundedLocked returns deadline, moved back to the WithMaxHold bound if it
// is later. l.mu must be held.
func (l *Lock) boundedLocked(deadline time.Time) time.Time {
	if l.maxHold <= 0 {
		return deadline
	}
	return earliest(deadline, l.holdEnd())
}

// maxHoldPassed reports whether the deadline that passed is the WithMaxHold
// bound, rather than the end of a lease that was not renewed in time.
func (l *Lock) maxHoldPassed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxHold > 0 && !l.deadline.Before(l.holdEnd())
}
