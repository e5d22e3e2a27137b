package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// WithFairness makes the call wait in one line with every other fair waiter
// for the key, in every process: the lock goes to waiters in the order in
// which they first found it held (first come, first served), and each
// release wakes only the waiter whose turn it is. Without it, waiters of
// one Client take turns in order and, with the Redis backend, the processes
// that wait take turns (each release wakes the next one, which may hand
// the lock on to its own waiters a few times), but a caller that is not
// waiting yet may take a free lock first: no order across processes is
// promised.
//
// The line is kept on the server, each place with a lease of 2 seconds
// (driver.PlaceLease) that the waiter renews while it waits: a waiter that crashes or is paused
// for longer loses its place, and holds the others up for that long at
// most. A waiter that gives up leaves the line at once.
//
// Use it for every acquire of a key: a plain acquire ignores the line, so
// it may take the lock while fair waiters wait for it. With TryAcquire (or
// WithWait(0)) the call does not join the line, and takes the lock only
// when no one is waiting in it. The store must keep lines of waiters
// (driver.Lines); otherwise the call fails with ErrUnsupported.
func WithFairness() AcquireOption {
	return func(c *acquireConfig) { c.fair = true }
}

// fairRenewPlace is how often a fair waiter renews its place in line.
const fairRenewPlace = driver.PlaceLease / 3

// fairAttempt makes one attempt for a fair waiter: it joins the line or
// renews its place, unless the call makes a single attempt. seq numbers
// the waiter's attempts; a waiter in line accepts grants (fairGrantLease),
// which a store without them ignores.
func (c *Client) fairAttempt(ctx context.Context, req driver.Request, single bool, seq int64) (driver.Result, error) {
	if single {
		return c.lines.AcquireInLine(ctx, req, driver.Turn{})
	}
	return c.lines.AcquireInLine(ctx, req, driver.Turn{Place: driver.PlaceLease, Grant: fairGrantLease(req.TTL), Seq: seq})
}

// fairGrantLease is the lease a release grants a fair waiter with ttl: no
// longer than a place in line lasts (see driver.Lines).
func fairGrantLease(ttl time.Duration) time.Duration {
	return min(ttl, driver.PlaceLease)
}

// checkFair refuses WithFairness on a backend without a line of waiters.
func (c *Client) checkFair(cfg acquireConfig) error {
	if cfg.fair && c.lines == nil {
		return fmt.Errorf("%w: WithFairness needs a store that keeps a line of waiters (driver.Lines); %T does not", ErrUnsupported, c.store)
	}
	return nil
}

// completeGrant extends, in the background, the lease of a lock granted to
// a fair waiter for less than its ttl (fairGrantLease) to the full ttl, as
// Refresh does; the caller has the lock meanwhile. It waits first for a
// third of what is left of the granted lease: in a busy line most locks
// are released before that, and then need no second round trip (the
// extension would otherwise be a second script in every fair hand-off). It
// retries while the store cannot be reached, until the lock ends (its local
// deadline, a release, Close). Close waits for it.
func (c *Client) completeGrant(lk *Lock, ttl time.Duration) {
	end := c.ops.begin()
	go func() {
		defer end()
		first := time.NewTimer(time.Until(lk.Deadline()) / 3)
		select {
		case <-lk.Done():
			first.Stop()
			return
		case <-c.closeCtx.Done():
			first.Stop()
			return
		case <-first.C:
		}
		pause := min(fairGrantLease(ttl)/8, 100*time.Millisecond)
		for {
			lk.mu.Lock()
			ttl := lk.ttl // a Refresh by the caller may have changed it
			lk.mu.Unlock()
			err := lk.Refresh(c.closeCtx, ttl)
			if err == nil || !errors.Is(err, ErrUnavailable) || c.closed() {
				return // extended, or the lock ended (lost, released), or Close
			}
			t := time.NewTimer(pause)
			select {
			case <-lk.Done():
				t.Stop()
				return
			case <-c.closeCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}
