package driver

import (
	"context"
	"time"
)

// Store is the store a Client keeps its holds in: the one interface every
// store implements. Notifier, Lines, Inspector and Ticker are capabilities a
// store may add; the Client finds them once, when it is made.
//
// Every rule of Backend holds for every kind of hold (req.Kind): one
// attempt in one round trip (Renew: one per batch, also when it mixes
// kinds), no hidden retries, atomic acquisitions minting fences above every
// earlier fence of the hold's name and kind and above FenceFloor, a lease
// per hold counted by the store's clock, releases and renewals that act
// only on the request's Token, renewals that never re-create a lapsed hold,
// and tombstones. The kinds add their own rules: SemaphoreBackend's for
// KindSemaphore (Request.Permits) and RWLockBackend's for KindRead and
// KindWrite (Request.Place); KindLock re-enters by Owner, the others do not.
//
// Errors are Backend's, plus one: a request of a kind the store does not
// keep (Supports false), or that it cannot serve, gets an error matching
// ErrUnsupported, returned before any I/O. The Client does not retry it.
type Store interface {
	// Supports reports, without I/O, whether the store keeps holds of kind
	// k. It is true for KindLock.
	Supports(k Kind) bool

	// Acquire makes one atomic attempt to take a hold of req.Kind: it takes
	// it, re-enters (KindLock, same Owner), completes a retry (a Token that
	// holds a live hold), or changes nothing. A refusal is Acquired false,
	// with the time until a hold may be free in HolderTTL; not an error.
	Acquire(ctx context.Context, req Request) (Result, error)

	// Release gives up req.Token's hold of req.Kind. Result.Held is false
	// when there was none (expired, taken over, already released); a
	// Tombstone is left all the same. Waiters are woken when it frees
	// something they wait for.
	Release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error)

	// Renew extends the leases of a batch of holds, of any kinds, in one
	// round trip, in the order of reqs. An error for the whole batch is
	// returned as err; per-hold errors go in RenewResult.Err.
	Renew(ctx context.Context, reqs []RenewRequest) ([]RenewResult, error)

	// TTL returns the remaining lease, measured by the store, of ref's
	// hold, or an error matching ErrNotHeld.
	TTL(ctx context.Context, ref Ref) (time.Duration, error)

	// Check reports a namespace the store cannot use (an error matching
	// ErrInvalidArgument) or a store that cannot be used (any other error);
	// nil when all is well or it cannot tell. The Client calls it at
	// start-up (Client.Check).
	Check(ctx context.Context, namespace string) error
}
