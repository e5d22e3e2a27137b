package driver

import (
	"context"
	"time"
)

// Turn is what a waiter in a line asks of an attempt (Lines.AcquireInLine).
type Turn struct {
	// Place is how long a refused attempt keeps the waiter's place in the
	// line, from now (at most PlaceLease). 0: the waiter does not join (a
	// single attempt).
	Place time.Duration
	// Grant, when positive, lets a release take the lock for the waiter
	// when its turn comes, with a lease of Grant (at most PlaceLease and
	// the request's TTL), announced on its watch (Watch.TakeGrant). A store
	// without grants ignores it, and wakes the waiter instead.
	Grant time.Duration
	// Seq numbers the waiter's attempts (increasing): a grant names the
	// latest one the store had handled (Grant.Seq).
	Seq int64
}

// Grant is a lock a release took for a waiter in line (Turn.Grant).
type Grant struct {
	Fence int64 // the fence minted for the waiter's new hold
	Seq   int64 // the waiter's latest attempt the store had handled
}

// Lines is implemented by stores that keep, for each lock (KindLock), a line
// of waiters shared by every process (WithFairness), in which the free
// lock goes to the first waiter whose place is still live, and whose
// release can pass the lock it frees on in the same step.
//
// A place has a lease, counted by the store like a hold's: a waiter renews
// it with each attempt, and a place whose lease ended is dropped, so a
// waiter that crashed or was paused holds the line up for the rest of its
// place's lease at most. Release of a token that holds nothing but has a
// place removes the place (a waiter that gave up), waking the next waiter
// if the lock is free.
//
// Grants: when a release frees the lock while a waiter that asked for
// grants (Turn.Grant) is first in line with a live place, a store that
// grants takes the lock for it in the same step: a new hold for its Token,
// with its Owner, a fence minted as for an acquire (above the attempt's
// FenceFloor), and a lease of Grant counted by the store from the release.
// It announces the grant to the waiter's watch (Watch.TakeGrant), naming
// the Seq of the waiter's latest attempt the store had handled before the
// grant. That attempt was sent before the grant was made, so the waiter
// counts the grant's lease from when it sent that attempt: its local
// deadline never passes the store's. A later attempt with the same token
// finds the hold and completes it as a retry, so a lost announcement costs
// a round trip, not the lock. Grant is at most PlaceLease: a waiter that
// died in line is granted a lock it will never use, which holds the line
// up for no longer than its place would have.
type Lines interface {
	// AcquireInLine is Acquire of a KindLock for a waiter in the lock's
	// line: the free lock is taken only when the line is empty or req.Token
	// is first in it. A refused waiter joins the end of the line, or keeps
	// its place, for t.Place; HolderTTL is then the time until the holder's
	// lease or, if the lock is free, the first waiter's place ends.
	// Re-entry by the owner does not wait in line.
	AcquireInLine(ctx context.Context, req Request, t Turn) (Result, error)

	// HandOff is Release of rel and, when that frees the lock (no hold is
	// left) and no acquire was refused while it was held, Acquire of next
	// in the same atomic step: a new hold as Acquire makes one (a fence
	// above every earlier one and next.FenceFloor, a lease of next.TTL
	// counted by the store from then, refused if next.Token has a
	// tombstone). next names the same lock, with Owner equal to its Token.
	// When the lock is not handed over, the Result has Acquired false and
	// the release wakes waiters as Release does. A store may never hand a
	// lock over: HandOff is then Release.
	//
	// A Client hands a lock to its own next waiter for the key this way:
	// one round trip, where a release, a wake-up and the waiter's acquire
	// cost two. The refusal rule keeps the Client's goroutines from keeping
	// the lock from other processes, whose waiters make an attempt, and are
	// refused, before they wait. A store that lines up the waiting
	// processes may instead hand the lock on a few times in a row during
	// the releasing process's turn, and then wake the next process in line
	// (ReleaseResult.Yielded).
	HandOff(ctx context.Context, rel ReleaseRequest, next Request) (ReleaseResult, Result, error)
}
