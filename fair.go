package fencelock

import (
	"context"
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

// WithFairness makes the call wait in one line with every other fair waiter
// for the key, in every process: the lock goes to waiters in the order in
// which they first found it held (first come, first served), and each
// release wakes only the waiter whose turn it is. Without it, waiters of
// one Client take turns in order, but across processes the first to reach
// the store after a release wins.
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
// renews its place, unless the call makes a single attempt.
func (c *Client) fairAttempt(ctx context.Context, req AcquireRequest, single bool) (AcquireResult, error) {
	place := FairPlaceLease
	if single {
		place = 0
	}
	return c.fair.AcquireFair(ctx, req, place)
}

// checkFair refuses WithFairness on a backend without a line of waiters.
func (c *Client) checkFair(cfg acquireConfig) error {
	if cfg.fair && c.fair == nil {
		return fmt.Errorf("%w: WithFairness needs a backend that keeps a line of waiters (fencelock.FairBackend); %T does not", ErrUnsupported, c.backend)
	}
	return nil
}
