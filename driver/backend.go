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

// LockRef names one hold of a lock.
type LockRef struct {
	Namespace string // prefix of every key of the lock (Client's WithNamespace)
	Key       string // the lock's name as the user gave it
	Token     string // the random owner token of this acquisition
}

// AcquireRequest is one acquire attempt.
type AcquireRequest struct {
	LockRef
	// Owner identifies the holder for reentrancy: an acquire by the same Owner
	// re-enters. Without WithOwner it equals Token, so nothing re-enters.
	Owner string
	// TTL is the lease, counted by the store from when it handles the request.
	TTL time.Duration
	// FenceFloor is the largest fencing token the Client has seen (for any
	// key). A new acquisition's fence must be greater than it too, so that
	// fences never go back even when the store forgot the last one (a
	// promoted replica that missed it, a restart without persistence).
	FenceFloor int64
	// Identity is the Client's WithIdentity: who holds the lock, for
	// operators (host:pid, a pod name), "" when not set. A backend that
	// records it stores it with a lock this request takes while free,
	// keeps it on re-entry, and returns it in LockInfo.Identity; it has no
	// part in ownership. Backends that do not record it ignore it.
	Identity string
	// Notify asks a ChangeNotifier backend to wake the lock's change
	// watchers when this request takes the lock (not on re-entry): others
	// watch the lock without waiting for it (Observe watches an election,
	// and learns of a new leader at once). Campaign sets it. Other backends
	// ignore it.
	Notify bool
}

// AcquireResult is the outcome of one acquire attempt.
type AcquireResult struct {
	Acquired bool
	// Fence is the fencing token of the holding acquisition: new on a fresh
	// acquire, the existing one on re-entry or retry. Zero when not acquired.
	Fence int64
	// Holds is the lock's hold count after this attempt (1 unless re-entered).
	Holds int
	// HolderTTL is the current holder's remaining lease when not acquired
	// (zero if unknown or the lock has no expiry). Waiters use it to bound
	// their fallback timer.
	HolderTTL time.Duration
	// Validity, when positive, is the lease the backend guarantees in place
	// of TTL, counted from before the request was sent; the Client's local
	// deadline is then based on it. A backend whose lease is not exactly
	// TTL says so here: shorter (a quorum of servers whose clocks drift, as
	// in the redlock package) or longer (a store that rounds leases up).
	// Zero means TTL.
	Validity time.Duration
}

// ReleaseRequest gives up one hold.
type ReleaseRequest struct {
	LockRef
	// Tombstone, when positive, is how long the backend must refuse an
	// Acquire with this Token after the release, whether or not the release
	// found the hold: an acquire request of the token whose reply was lost
	// may still arrive, and must not take the lock for nobody.
	Tombstone time.Duration
	// Notify asks a ReleaseNotifier backend to wake the watchers of the
	// lock's releases when this release frees the lock (or hands it on),
	// even if no acquire was refused while it was held: others watch the
	// hold without waiting for it (Observe watches an election's leader,
	// and learns of a resignation at once). Other backends ignore it.
	Notify bool
}

// ReleaseResult is the outcome of a release.
type ReleaseResult struct {
	// Held reports whether the lock held the token (and so was released).
	Held bool
	// Remaining is the number of holds left (re-entrant locks); 0 means the
	// lock was deleted.
	Remaining int
	// Yielded reports that the release freed the lock for another process
	// whose turn it was, and woke it alone: the store lines up the
	// processes that wait for a lock, and put the releasing one, which has
	// waiters too, behind the others. The Client then leaves its waiters
	// asleep until a notification wakes them, rather than letting the
	// next one try at once and take the lock from the process woken for
	// it. Backends without such a line leave it false.
	Yielded bool
}

// RenewRequest extends one hold's lease.
type RenewRequest struct {
	LockRef
	TTL time.Duration
}

// RenewResult is the outcome of renewing one hold.
type RenewResult struct {
	// Held reports whether the lock still held the token and was extended.
	// False means the hold is gone: the caller has lost the lock.
	Held bool
	// Err is a per-lock failure that says nothing about ownership (the
	// caller retries). Held is meaningless when Err is set.
	Err error
	// Validity, when positive, is the lease the renewal guarantees in place
	// of the request's TTL, counted from before it was sent (see
	// AcquireResult.Validity). Zero means TTL.
	Validity time.Duration
}
