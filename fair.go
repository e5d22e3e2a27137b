package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// FairBackend is implemented by backends that keep, for each lock, a line of
// waiters on the server (WithFairness): one line for every process, in
// which the free lock goes to the first waiter whose place is still live.
// The Redis backend implements it.
//
// A place has a lease, counted by the store like a hold's: a waiter renews
// it with each attempt, and a place whose lease ended is dropped, so a
// waiter that crashed or was paused holds the line up for the rest of its
// place's lease at most. Release of a token that holds nothing but has a
// place removes the place (a waiter that gave up), waking the next waiter
// if the lock is free.
type FairBackend interface {
	// AcquireFair is Acquire for a waiter in the line: the free lock is
	// taken only when the line is empty or req.Token is first in it. When
	// refused, the token joins the end of the line, or keeps its place,
	// with a place lasting place from now (0: it does not join, as for a
	// single attempt). HolderTTL is then the time until the holder's lease
	// or, if the lock is free, the first waiter's place ends. Re-entry by
	// the owner does not wait in line.
	AcquireFair(ctx context.Context, req AcquireRequest, place time.Duration) (AcquireResult, error)

	// WatchTurn is WatchReleases for the waiter with token: C receives a
	// value when the lock is free and token may be first in line, or when
	// a notification may have been missed; not when the lock goes to
	// another waiter. A backend without notifications returns an error, and
	// the waiter polls.
	WatchTurn(ctx context.Context, namespace, key, token string) (*Watch, error)
}

// FairGranter is implemented by fair backends whose release hands the free
// lock straight to the first waiter in line, instead of waking it to take
// the lock itself: the hand-off then costs the waiter no round trip. The
// Redis backend implements it (except with replica acknowledgement).
//
// A waiter accepts grants by making its attempts with AcquireFairGrant. When
// a release frees the lock while that waiter is first in line with a live
// place, the store takes the lock for it in the same step: a new hold for
// req.Token, with req.Owner, a fence minted as for an acquire (above the
// attempt's FenceFloor), and a lease of grant counted by the store from the
// release. It then announces the grant to the waiter's WatchTurn watch
// (Watch.TakeGrant), naming seq of the waiter's latest attempt that the
// store had handled before the grant. That attempt was sent before the
// grant was made, so the waiter counts the grant's lease from when it sent
// that attempt: its local deadline never passes the store's. A later
// attempt with the same token finds the hold and completes it as a retry
// (a new lease of req.TTL from then), so a lost announcement costs a round
// trip, not the lock.
//
// grant is at most FairPlaceLease (and at most req.TTL): a waiter that died
// in line is granted a lock it will never use, which holds the line up for
// no longer than its place would have. A waiter whose ttl is longer extends
// the granted lease in the background, once a third of it has passed (a
// lock released before that never pays for the extension).
type FairGranter interface {
	FairBackend

	// AcquireFairGrant is AcquireFair for a waiter that accepts grants of
	// a lease of grant; seq numbers the waiter's attempts (increasing).
	AcquireFairGrant(ctx context.Context, req AcquireRequest, place, grant time.Duration, seq int64) (AcquireResult, error)
}

// Grant is a lock a release handed to a fair waiter (FairGranter).
type Grant struct {
	Fence int64 // the fence minted for the waiter's new hold
	Seq   int64 // the waiter's latest attempt the store had handled
}

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
// The line is kept on the server, each place with a lease of FairPlaceLease
// that the waiter renews while it waits: a waiter that crashes or is paused
// for longer loses its place, and holds the others up for that long at
// most. A waiter that gives up leaves the line at once.
//
// Use it for every acquire of a key: a plain acquire ignores the line, so
// it may take the lock while fair waiters wait for it. With TryAcquire (or
// WithWait(0)) the call does not join the line, and takes the lock only
// when no one is waiting in it. The backend must implement FairBackend
// (the Redis backend does); otherwise the call fails with ErrUnsupported.
func WithFairness() AcquireOption {
	return func(c *acquireConfig) { c.fair = true }
}

// FairPlaceLease is the lease of a fair waiter's place in the line
// (WithFairness). The waiter renews it every third of that while it waits.
const FairPlaceLease = 2 * time.Second

// fairRenewPlace is how often a fair waiter renews its place in line.
const fairRenewPlace = FairPlaceLease / 3

// fairAttempt makes one attempt for a fair waiter: it joins the line or
// renews its place, unless the call makes a single attempt. seq numbers
// the waiter's attempts; with a FairGranter, a waiter in line accepts
// grants (fairGrantLease).
func (c *Client) fairAttempt(ctx context.Context, req AcquireRequest, single bool, seq int64) (AcquireResult, error) {
	if single {
		return c.fair.AcquireFair(ctx, req, 0)
	}
	if c.granter != nil {
		return c.granter.AcquireFairGrant(ctx, req, FairPlaceLease, fairGrantLease(req.TTL), seq)
	}
	return c.fair.AcquireFair(ctx, req, FairPlaceLease)
}

// fairGrantLease is the lease a release grants a fair waiter with ttl: no
// longer than a place in line lasts (see FairGranter).
func fairGrantLease(ttl time.Duration) time.Duration {
	return min(ttl, FairPlaceLease)
}

// checkFair refuses WithFairness on a backend without a line of waiters.
func (c *Client) checkFair(cfg acquireConfig) error {
	if cfg.fair && c.fair == nil {
		return fmt.Errorf("%w: WithFairness needs a backend that keeps a line of waiters (fencelock.FairBackend); %T does not", ErrUnsupported, c.backend)
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
