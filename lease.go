package fencelock

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The lease of a held Lock, as this process sees it.
//
// A lease of ttl granted or renewed by a request sent at time S ends on the
// server no earlier than S+ttl: the server counts it from when it handles
// the request, which is later. The Client counts the lock as held until the
// local deadline S+ttl−margin, on the monotonic clock, where the margin (a
// fraction of the ttl, WithSafetyMargin) leaves time for the loss signal to
// reach the holder before the server's lease can end.
//
// Lock order. A Lock's lease fields (ttl, deadline, nextRenew, renewing,
// turnFree) and its end state (releasing, err, done, onEnd) are guarded by
// Lock.mu. The lease keeper (internal/lease) guards its schedule, and each
// Lock's place in it (kept), with its own mutex, and takes a Lock.mu while
// holding it; nothing else may nest them. Code holding either never calls
// the store or a callback, and code holding a Lock.mu never calls into the
// keeper. The keeper holds its mutex only for bounded work (a few hundred
// schedule entries at most), never across a store call.

// localLease is how long after sending the request that granted or renewed
// a lease of ttl the lock still counts as held here: ttl less the margin.
func (c *Client) localLease(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*c.cfg.safetyMargin)
}

// grantedEnd is the local deadline of a lease of ttl granted by a request
// sent at sent, whose backend reported validity (driver.Result.Validity,
// driver.RenewResult.Validity; 0: the lease is ttl).
func (c *Client) grantedEnd(sent time.Time, ttl, validity time.Duration) time.Time {
	if validity > 0 {
		ttl = validity
	}
	return c.leaseEnd(sent, ttl)
}

// leaseEnd is the local deadline of a lease of ttl granted by a request
// sent at sent.
func (c *Client) leaseEnd(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(c.localLease(ttl))
}

// beginRenewalLocked takes the lock's renewal turn for a request of ttl.
// Renewals of one lock take turns (the lease keeper's and Refresh's), so that
// the last one to finish is the last one the server applied and may set the
// local deadline. l.mu must be held, and the turn free (l.renewing false).
func (l *Lock) beginRenewalLocked() {
	l.renewing = true
}

// endRenewalTurnLocked gives the renewal turn back and wakes a Refresh
// waiting for it. l.mu must be held.
func (l *Lock) endRenewalTurnLocked() {
	l.renewing = false
	if l.turnFree != nil {
		close(l.turnFree)
		l.turnFree = nil
	}
}

// renewalTurnLocked returns a channel that is closed when the renewal in
// flight ends. l.mu must be held, and l.renewing true.
func (l *Lock) renewalTurnLocked() <-chan struct{} {
	if l.turnFree == nil {
		l.turnFree = make(chan struct{})
	}
	return l.turnFree
}

// finishRenewal applies the result of a renewal sent at sent with ttl, and
// ends the renewal turn.
//   - Success: the server's lease now ends no earlier than sent+ttl.
//   - The server no longer has the hold: the lock is lost.
//   - An error: the server may or may not have applied it, so the local
//     deadline becomes the earlier of the two leases it may have (unless the
//     request was certainly not sent: ErrNotSent); the keeper retries soon.
//   - A refusal of the client's configuration (ErrMisconfigured): the lock
//     is lost at once; nothing is retried.
func (l *Lock) finishRenewal(sent time.Time, ttl time.Duration, res driver.RenewResult) {
	c := l.client
	l.mu.Lock()
	l.endRenewalTurnLocked()
	if l.err != nil || l.releasing {
		l.mu.Unlock()
		return
	}
	switch {
	case errors.Is(res.Err, ErrMisconfigured):
		// Refused for the client's configuration: no retry can succeed,
		// so the holder had better know now than at the deadline. (A
		// release would be refused too: the hold lapses on the server.)
		l.mu.Unlock()
		l.loseWith(fmt.Errorf("%w: renewal refused: %w", ErrLost, res.Err), lostRefused, "renewal refused: "+res.Err.Error(), false)
	case res.Err != nil:
		if !errors.Is(res.Err, ErrNotSent) {
			// It may have been applied, with a shorter ttl than before.
			l.deadline = earliest(l.deadline, c.leaseEnd(sent, ttl))
			// Or it may still be on its way, and land after a later
			// renewal with a longer ttl, setting the lease back to its own
			// ttl from whenever it lands: no later grant counts for more.
			if l.unsettled == 0 || ttl < l.unsettled {
				l.unsettled = ttl
			}
		}
		l.nextRenew = time.Now().Add(renewRetryDelay(l.autoRenew))
		deadline := l.deadline
		l.mu.Unlock()
		c.log.Warn("fencelock: renewal failed; retrying until the lease deadline",
			"key", l.ref.Key, "fence", l.fence, "token", shortToken(l.ref.Token),
			"deadline_in", time.Until(deadline).Round(time.Millisecond), "error", res.Err)
	case !res.Held:
		l.mu.Unlock()
		l.lose(lostGone, "renewal found the lock gone (expired, deleted or taken over)", false)
	default:
		end := c.grantedEnd(sent, ttl, res.Validity)
		if l.unsettled > 0 && l.unsettled < ttl {
			end = earliest(end, c.leaseEnd(sent, l.unsettled))
		}
		l.deadline = l.boundedLocked(end)
		l.nextRenew = sent.Add(l.autoRenew)
		l.mu.Unlock()
	}
}

// renewRetryDelay is the pause before retrying a renewal that failed with an
// error: a quarter of the interval, so that several retries fit in the lease.
func renewRetryDelay(interval time.Duration) time.Duration {
	return min(max(interval/4, 5*time.Millisecond), time.Second)
}

// renewalDue reports whether l may go in a renewal batch gathered now: it is
// due, or due within a fifth of its interval. The keeper wakes when a lock is
// due; locks due soon after go along, a little early, while the batch has
// room or the wake-up's burst has, so that locks due at about
// the same time share a round trip and a wake-up (see lease.Keeper).
// l.mu must be held.
func (l *Lock) renewalDue(now time.Time) bool {
	return l.autoRenew > 0 && !l.renewing && !now.Before(l.nextRenew.Add(-l.autoRenew/5))
}

// expiredLocked reports whether l counts as held by its state but its local
// deadline has passed. l.mu must be held.
func (l *Lock) expiredLocked(now time.Time) bool {
	return l.err == nil && !l.releasing && !now.Before(l.deadline)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func latestOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

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

// keptLock is a Lock as the lease keeper sees it (lease.Holder): the
// methods the keeper calls, apart from Lock's own.
type keptLock Lock

func (k *keptLock) Lock()                          { k.mu.Lock() }
func (k *keptLock) Unlock()                        { k.mu.Unlock() }
func (k *keptLock) Ref() driver.Ref                { return k.ref }
func (k *keptLock) RenewInterval() time.Duration   { return k.autoRenew }
func (k *keptLock) EndedLocked() bool              { return k.err != nil || k.releasing }
func (k *keptLock) ExpiredLocked(t time.Time) bool { return (*Lock)(k).expiredLocked(t) }
func (k *keptLock) RenewalDueLocked(t time.Time) bool {
	return (*Lock)(k).renewalDue(t)
}
func (k *keptLock) BeginRenewalLocked()       { (*Lock)(k).beginRenewalLocked() }
func (k *keptLock) EndRenewalTurnLocked()     { (*Lock)(k).endRenewalTurnLocked() }
func (k *keptLock) DeadlineLocked() time.Time { return k.deadline }
func (k *keptLock) Expire()                   { (*Lock)(k).expire() }

func (k *keptLock) RenewRequestLocked() driver.RenewRequest {
	return driver.RenewRequest{Ref: k.ref, TTL: k.ttl}
}

func (k *keptLock) FinishRenewal(sent time.Time, ttl time.Duration, res driver.RenewResult) {
	(*Lock)(k).finishRenewal(sent, ttl, res)
}

// NextEventLocked is the lock's next renewal, when it renews itself and
// no renewal is in flight, or else its local deadline.
func (k *keptLock) NextEventLocked() (time.Time, bool) {
	if k.autoRenew > 0 && !k.renewing && k.nextRenew.Before(k.deadline) {
		return k.nextRenew, true
	}
	return k.deadline, false
}
