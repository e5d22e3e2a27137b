package driver

import (
	"context"
	"time"
)

// Backend is the store a Client keeps its locks in. The redisbackend package
// implements it for Redis (single node, Sentinel, Cluster); other stores
// (a quorum of Redis masters, etcd) implement the same contract, which the
// fencelocktest package checks.
//
// Every method makes one attempt in one round trip (Renew: one per batch) and
// must be safe for concurrent use. A Backend belongs to one Client: the
// Client closes it, if it implements io.Closer, when the Client is closed.
//
// The contract, for every lock named by Namespace and Key:
//   - Acquire is atomic: it takes a free lock, or re-enters a lock held by
//     the same Owner, or leaves the lock unchanged. A new acquisition mints a
//     fencing token strictly greater than every token minted before for that
//     lock, in the same atomic step, and greater than the request's
//     FenceFloor. Re-entry keeps the fence and adds a hold.
//     Acquire with a Token the lock already holds is a retry: it succeeds,
//     adds no second hold, and sets that hold's lease to TTL from now, so an
//     ambiguous timeout can be retried.
//   - Every hold has a lease of its own. A hold whose lease has ended is
//     gone, even while other holds of the same owner keep the lock: Renew and
//     Release of it report it not held, and it is not counted in Holds or
//     Remaining. The lock is free once no hold's lease is running.
//   - Release and Renew act only when the lock holds Token: a stale holder
//     never disturbs a successor. Renew never re-creates a lapsed hold.
//   - A Release with Tombstone > 0 makes the backend refuse, for that long,
//     any Acquire with the same Token (Acquired false, nothing changed), also
//     when the release found nothing to release. The Client asks for it when
//     an acquire request of that token may still be on its way (its reply was
//     lost), so that a late copy cannot take a lock nobody waits for.
//   - Expiry is measured by the store's clock, relative to the request (TTL),
//     never from the client's wall clock.
//   - A request is sent at most once: a backend never re-sends a request
//     after it failed or after the call returned (no hidden retries). A
//     request that was on the wire when the call gave up may still arrive;
//     the rules above make that harmless (renewals never re-create, releases
//     leave tombstones on request). The Client retries on its own terms.
//
// Errors: any error other than one matching ErrInvalidArgument or
// ErrMisconfigured means the store could not be reached or did not answer
// (the Client reports it as ErrUnavailable); the request may or may not
// have been applied. A backend returns an error matching ErrMisconfigured
// when the store refused the client itself, so that retrying cannot help:
// its credentials (Redis's WRONGPASS and NOAUTH, etcd's authentication
// failures) or its permissions (Redis's NOPERM, etcd's permission denied);
// the Client then fails the call at once and retries nothing. Such an
// error also matches ErrNotSent when the store applied none of the
// request; a store may refuse part of one after applying the rest, as
// Redis does for a script's PUBLISH to a channel the user may not use. Two
// kinds say more: ErrNotSent (certainly not applied) and ErrNotReplicated (applied
// but acknowledged by too few replicas; for an acquire, the backend has
// released it again, and returns another error if it could not).
type Backend interface {
	// Acquire makes one attempt to take the lock. A lock held by another
	// owner is not an error: the result has Acquired false.
	Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error)

	// Release gives up the hold identified by req.Token. Result.Held is false
	// when the lock did not hold the token (expired, taken over, or already
	// released). When the last hold goes, waiters are woken.
	Release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error)

	// Renew extends the leases of a batch of holds in one round trip. The
	// results are in the order of reqs. An error for the whole batch (the
	// server is unreachable) is returned as err; per-lock errors go in
	// RenewResult.Err.
	Renew(ctx context.Context, reqs []RenewRequest) ([]RenewResult, error)

	// TTL returns the remaining server-side lease of the hold identified by
	// req.Token, or an error matching ErrNotHeld.
	TTL(ctx context.Context, req LockRef) (time.Duration, error)
}

// LockRef is Ref, under the name Backend's methods give it.
type LockRef = Ref

// AcquireRequest is Request, under the name Backend's methods give it.
type AcquireRequest = Request

// AcquireResult is Result, under the name Backend's methods give it.
type AcquireResult = Result
