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
//
// It takes leaseKeeper.mu, then a Lock's mu (see lease.go for the lock order).
type leaseKeeper struct {
	c *Client

	// ctx bounds the renewal requests; it is cancelled by stop, which Close
	// calls only after it has released the locks, so that no lock lapses
	// because the Client is closing.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	locks     map[*Lock]struct{}
	accepting bool      // false once Close has begun releasing
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
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.wg.Add(1)
	go k.loop()
	return k
}

// add starts watching l. It fails with ErrClosed once Close has begun
// releasing the Client's locks.
func (k *leaseKeeper) add(l *Lock) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.accepting {
		return ErrClosed
	}
	k.locks[l] = struct{}{}
	l.mu.Lock()
	next := l.nextEventLocked()
	l.mu.Unlock()
	if next.Before(k.wakeAt) {
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
	k.mu.Lock()
	defer k.mu.Unlock()
	l.mu.Lock()
	next := l.nextEventLocked()
	l.mu.Unlock()
	if next.Before(k.wakeAt) {
		k.poke()
	}
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

// stop ends the loop, cancels the renewals in flight and waits for both.
func (k *leaseKeeper) stop() {
	close(k.quit)
	k.cancel()
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
		case l.expiredLocked(now):
			delete(k.locks, l)
			expired = append(expired, l)
		case l.renewalDue(now) && len(due) < maxRenewBatch:
			l.beginRenewalLocked()
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
		l.expire()
	}
	return next
}

// renew sends one renewal batch and applies the results. The request is
// bounded by half the shortest renewal interval of the batch, so that a
// server that does not answer leaves time for a retry before the deadline.
func (k *leaseKeeper) renew(due []*Lock) {
	defer k.wg.Done()
	sent := now()
	reqs := make([]RenewRequest, len(due))
	latest := sent
	timeout := MaxTTL
	for i, l := range due {
		l.mu.Lock()
		reqs[i] = RenewRequest{LockRef: l.ref, TTL: l.ttl}
		latest = latestOf(latest, l.deadline)
		timeout = min(timeout, renewTimeout(l.autoRenew))
		l.mu.Unlock()
	}
	ctx, cancel := context.WithDeadline(k.ctx, earliest(latest, sent.Add(timeout)))
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
