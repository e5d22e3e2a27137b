package driver

import (
	"context"
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
// grant is at most PlaceLease (and at most req.TTL): a waiter that died
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
