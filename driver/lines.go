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

// Lines is implemented by stores that keep, for each lock (KindLock), a line
// of waiters shared by every process (WithFairness), and whose release can
// pass the lock it frees on in the same step. The rules of FairBackend,
// FairGranter and HandOffBackend hold.
type Lines interface {
	// AcquireInLine is Acquire of a KindLock for a waiter in the lock's
	// line: the free lock is taken only when the line is empty or
	// req.Token is first in it. A refused waiter joins the end of the line,
	// or keeps its place, for t.Place. Re-entry by the owner does not wait
	// in line.
	AcquireInLine(ctx context.Context, req Request, t Turn) (Result, error)

	// HandOff is Release of rel and, when that frees the lock (no hold is
	// left) and no acquire was refused while it was held, Acquire of next
	// in the same atomic step (next names the same lock, with Owner equal
	// to its Token). When the lock is not handed over, the Result has
	// Acquired false and the release wakes waiters as Release does. A store
	// that never hands a lock over returns an error matching
	// ErrUnsupported before any I/O, and the Client releases with Release.
	HandOff(ctx context.Context, rel ReleaseRequest, next Request) (ReleaseResult, Result, error)
}
