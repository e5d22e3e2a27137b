package driver

import (
	"context"
)

// HandOffBackend is implemented by backends whose release can hand the lock
// it frees to another acquire request in the same atomic step. A Client
// uses it for its own goroutines: when one releases a lock that another
// goroutine of the same Client waits for (the next in the Client's line for
// the key), one request releases the lock and takes it for the waiter. The
// hand-off then costs one round trip, where a release, a wake-up and the
// waiter's acquire cost two and a goroutine switch in between. A waiter
// that acquires for an owner (WithOwner, Campaign, RunJob) is not handed
// the lock, which would be its token's alone: the release wakes it, and it
// takes the lock with an attempt of its own.
//
// So that a Client's goroutines never keep the lock from other processes,
// the store hands the lock over only when no acquire was refused while it
// was held: a waiter of another process makes an attempt, and is refused,
// before it waits, so a refusal means someone else may be waiting. The
// release then frees the lock and wakes the waiters as Release does, and
// the Client's next waiter takes its chance with the others. A store that
// lines up the waiting processes (the Redis backend) may instead hand the
// lock on a few times in a row during the releasing process's turn, and
// then wake the next process in line (ReleaseResult.Yielded): the other
// processes still get the lock after a bounded number of holds.
//
// The Redis backend implements it (except with replica acknowledgement,
// where it releases only); fencelocktest checks it.
type HandOffBackend interface {
	// ReleaseHandOff is Release of req and, when that frees the lock (no
	// hold is left) and no acquire was refused while it was held, Acquire
	// of next in the same atomic step: a new acquisition as Acquire makes
	// one (a fence above every earlier one and next.FenceFloor, a lease of
	// next.TTL counted by the store from then, refused if next.Token has a
	// tombstone). next names the same lock as req, with Owner equal to its
	// Token. When the lock is not handed over, the AcquireResult has
	// Acquired false and the release wakes waiters as Release does. An
	// error means that the request may or may not have been applied, as
	// for every call.
	ReleaseHandOff(ctx context.Context, req ReleaseRequest, next AcquireRequest) (ReleaseResult, AcquireResult, error)
}
