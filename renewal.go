package fencelock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// leaseKeeper watches the leases of every lock a Client holds, with one
// goroutine per Client: it renews the locks that have automatic renewal when
// they come due, several at once in one batch (one round trip), and declares
// a lock lost when its local lease deadline passes without a successful
// renewal (the server is unreachable or paused, or the lock never renewed).
type leaseKeeper struct {
	c *Client

	mu        sync.Mutex
	locks     map[*Lock]struct{}
	accepting bool      // false once Close has begun
	wakeAt    time.Time // when the loop will look again, unless woken

	wake chan struct{} // buffered: a pending "look again"
	quit chan struct{}
	wg   sync.WaitGroup // the loop and the renewal batches in flight
}

// maxRenewBatch caps one renewal round trip; the rest go in the next one.
const maxRenewBatch = 512

func newLeaseKeeper(c *Client) *leaseKeeper {
	k := &leaseKeeper{
		c:         c,
		locks:     make(map[*Lock]struct{}),
		accepting: true,
		wake:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
	}
	k.wg.Add(1)
	go k.loop()
	return k
}

// add starts watching l. It fails with ErrClosed once Close has begun.
func (k *leaseKeeper) add(l *Lock) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.accepting {
		return ErrClosed
	}
	k.locks[l] = struct{}{}
	if l.nextEvent().Before(k.wakeAt) {
		k.poke()
	}
	return nil
}

// remove stops watching l.
func (k *leaseKeeper) remove(l *Lock) {
	k.mu.Lock()
	delete(k.locks, l)
	k.mu.Unlock()
}

// reschedule makes the loop look again if l's next event is earlier than
// the loop's planned wake-up (after Refresh changed l's lease).
func (k *leaseKeeper) reschedule(l *Lock) {
	l.mu.Lock()
	next := l.nextEventLocked()
	l.mu.Unlock()
	k.mu.Lock()
	if next.Before(k.wakeAt) {
		k.poke()
	}
	k.mu.Unlock()
}

// stopAccepting refuses new locks and returns those held now.
func (k *leaseKeeper) stopAccepting() []*Lock {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.accepting = false
	held := make([]*Lock, 0, len(k.locks))
	for l := range k.locks {
		held = append(held, l)
	}
	return held
}

// stop ends the loop and waits for it and for renewals in flight (which
// Close has already cancelled).
func (k *leaseKeeper) stop() {
	close(k.quit)
	k.wg.Wait()
}

func (k *leaseKeeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *leaseKeeper) loop() {
	defer k.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := k.tick(time.Now())
		timer.Reset(time.Until(next))
		select {
		case <-k.quit:
			return
		case <-k.wake:
		case <-timer.C:
		}
	}
}

// tick declares lost the locks whose deadline has passed, starts a renewal
// batch for those due, and returns when to look again.
func (k *leaseKeeper) tick(now time.Time) time.Time {
	next := now.Add(time.Hour)
	var due, expired []*Lock

	k.mu.Lock()
	for l := range k.locks {
		l.mu.Lock()
		switch {
		case l.err != nil || l.releasing:
			delete(k.locks, l)
		case !now.Before(l.deadline):
			delete(k.locks, l)
			expired = append(expired, l)
		case l.renewalDue(now) && len(due) < maxRenewBatch:
			l.renewing = make(chan struct{})
			due = append(due, l)
			next = earliest(next, l.deadline)
		default:
			next = earliest(next, l.nextEventLocked())
		}
		l.mu.Unlock()
	}
	if len(due) == maxRenewBatch {
		next = now // more may be due: look again at once
	}
	k.wakeAt = next
	if len(due) > 0 {
		k.wg.Add(1)
		go k.renew(due)
	}
	k.mu.Unlock()

	for _, l := range expired {
		l.lose("the lease deadline passed without a successful renewal")
	}
	return next
}

// renew sends one renewal batch and applies the results.
func (k *leaseKeeper) renew(due []*Lock) {
	defer k.wg.Done()
	sent := now()
	reqs := make([]RenewRequest, len(due))
	latest := sent
	for i, l := range due {
		l.mu.Lock()
		reqs[i] = RenewRequest{LockRef: l.ref, TTL: l.ttl}
		latest = latestOf(latest, l.deadline)
		l.mu.Unlock()
	}
	// No renewal is useful after the last deadline of the batch; Close
	// cancels the batch at once.
	ctx, cancel := context.WithDeadline(k.c.closeCtx, latest)
	results, err := k.c.backend.Renew(ctx, reqs)
	cancel()
	if err == nil && len(results) != len(reqs) {
		err = fmt.Errorf("backend returned %d results for %d renewals", len(results), len(reqs))
	}
	for i, l := range due {
		res := RenewResult{Err: err}
		if err == nil {
			res = results[i]
		}
		l.finishRenewal(sent, reqs[i].TTL, res)
	}
	k.poke()
}

// renewalDue reports whether l should go in the renewal batch that starts
// now. The loop wakes when the first lock is due; locks due within a fifth of
// their interval after that go along, a little early, so that locks due at
// about the same time share a round trip. l.mu must be held.
func (l *Lock) renewalDue(now time.Time) bool {
	return l.autoRenew > 0 && l.renewing == nil && !now.Before(l.nextRenew.Add(-l.autoRenew/5))
}

// nextEvent returns when the lease keeper must next look at l.
func (l *Lock) nextEvent() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextEventLocked()
}

func (l *Lock) nextEventLocked() time.Time {
	if l.autoRenew > 0 && l.renewing == nil {
		return earliest(l.deadline, l.nextRenew)
	}
	return l.deadline
}

// finishRenewal applies the result of a renewal (automatic or Refresh) sent
// at sent with ttl, and ends its turn. Renewals of one lock take turns, so
// this is the last one the server applied, and it sets the local deadline
// (leaseEnd of sent and ttl) on success. On an error the server may or may not have applied
// it, so the deadline becomes the earlier of the two possible leases.
func (l *Lock) finishRenewal(sent time.Time, ttl time.Duration, res RenewResult) {
	l.mu.Lock()
	close(l.renewing)
	l.renewing = nil
	if l.err != nil || l.releasing {
		l.mu.Unlock()
		return
	}
	switch {
	case res.Err != nil:
		l.deadline = earliest(l.deadline, leaseEnd(sent, ttl))
		l.nextRenew = time.Now().Add(renewRetryDelay(l.autoRenew))
		deadline := l.deadline
		l.mu.Unlock()
		l.client.log.Warn("fencelock: renewal failed; retrying until the lease deadline",
			"key", l.ref.Key, "fence", l.fence, "token", shortToken(l.ref.Token),
			"deadline_in", time.Until(deadline).Round(time.Millisecond), "error", res.Err)
	case !res.Held:
		l.mu.Unlock()
		l.lose("renewal found the lock gone (expired, deleted or taken over)")
	default:
		l.deadline = leaseEnd(sent, ttl)
		l.nextRenew = sent.Add(l.autoRenew)
		l.mu.Unlock()
	}
}

// renewRetryDelay is the pause before retrying a renewal that failed with an
// error: a quarter of the interval, so that several retries fit in the lease.
func renewRetryDelay(interval time.Duration) time.Duration {
	return min(max(interval/4, 5*time.Millisecond), time.Second)
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
