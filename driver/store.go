package driver

import (
	"context"
	"time"
)

// Store is the store a Client keeps its holds in: the one interface every
// store implements. Notifier, Lines, Inspector and Ticker are capabilities a
// store may add; the Client finds them once, when it is made. A Store
// belongs to one Client: the Client closes it, if it implements io.Closer,
// when the Client is closed.
//
// Every method makes one attempt in one round trip (Renew: one per batch,
// also when it mixes kinds) and is safe for concurrent use.
//
// The contract, for every hold of a kind (Ref.Kind) and name (Namespace and
// Key); the plain lock, the semaphore and the read-write lock of one name
// are apart, and a request of one kind never sees the holds of another:
//   - Acquire is atomic: it takes a hold, or leaves everything unchanged. A
//     new hold mints a fencing token strictly greater than every token
//     minted before for that name and kind (readers and writers share one
//     counter), in the same atomic step, and greater than the request's
//     FenceFloor. An Acquire with a Token that holds a live hold is a
//     retry: it succeeds with the same fence, adds no second hold, and sets
//     that hold's lease to TTL from now, so an ambiguous timeout can be
//     retried.
//   - Every hold has a lease of its own, measured by the store's clock
//     relative to the request (TTL), never from the client's wall clock. A
//     hold whose lease has ended is gone, even while other holds of the
//     same owner keep the lock: Renew and Release of it report it not
//     held, and it is not counted in Holds or Remaining.
//   - Release and Renew act only on the hold of Token: a stale holder never
//     disturbs a successor. Renew never re-creates a lapsed hold.
//   - A Release with Tombstone > 0 makes the store refuse, for that long,
//     any Acquire with the same Token (Acquired false, nothing changed),
//     also when the release found nothing to release. The Client asks for
//     it when an acquire request of that token may still be on its way (its
//     reply was lost), so that a late copy cannot take a hold nobody waits
//     for.
//   - A request is sent at most once: a store never re-sends a request
//     after it failed or after the call returned (no hidden retries). A
//     request that was on the wire when the call gave up may still arrive;
//     the rules above make that harmless. The Client retries on its own
//     terms.
//
// KindLock, the plain lock, is re-entrant: an Acquire by the Owner of a
// held lock adds a hold with the holder's fence. It is free once no hold's
// lease is running.
//
// KindSemaphore: each permit is a hold. Acquire takes one when fewer than
// req.Permits permits are live (each caller's Permits is its own limit:
// the count is checked against the Permits of the request being decided).
// Owner is ignored: permits are not re-entrant. ReleaseResult.Remaining is
// 0. A refused acquire reports in HolderTTL the time until the earliest
// live permit's lease ends.
//
// KindRead and KindWrite are the holds of a read-write lock. A writer gets
// it only when no hold and no admitted reader (below) is live. A reader
// gets it when it is admitted, or when no writer holds the lock and no
// writer's intent is live (writers are preferred). A refused attempt with
// req.Place > 0 registers (or renews) the caller's place for Place from
// now: a writer's intent, or a reader's place among the readers waiting;
// a release by the Token, and taking the lock, withdraw it, and a release
// that finds only a place reports Held false. The release of the writer
// admits every reader then waiting (each for the rest of its place's
// lease), so that readers and writers take turns and neither starves the
// other. Owner is ignored; Remaining is 0. A refused acquire reports in
// HolderTTL the time until the lock may let it in: for a writer, until the
// last live hold's or admitted reader's lease ends; for a reader, until the
// writer's lease or the earliest intent ends.
//
// Errors: an error matching ErrUnsupported means the store does not keep
// the request's kind (Supports false) or cannot serve the request; it is
// returned before any I/O, and the Client does not retry it. Any other
// error than one matching ErrInvalidArgument or ErrMisconfigured means the
// store could not be reached or did not answer (the Client reports it as
// ErrUnavailable); the request may or may not have been applied. A store
// returns an error matching ErrMisconfigured when the store refused the
// client itself, so that retrying cannot help: its credentials (Redis's
// WRONGPASS and NOAUTH, etcd's authentication failures) or its permissions
// (Redis's NOPERM, etcd's permission denied); the Client then fails the
// call at once. Such an error also matches ErrNotSent when the store
// applied none of the request; a store may refuse part of one after
// applying the rest, as Redis does for a script's PUBLISH to a channel the
// user may not use. Two kinds say more: ErrNotSent (certainly not applied)
// and ErrNotReplicated (applied but acknowledged by too few replicas; for
// an acquire, the store has released it again, and returns another error
// if it could not).
type Store interface {
	// Supports reports, without I/O, whether the store keeps holds of kind
	// k. It is true for KindLock.
	Supports(k Kind) bool

	// Acquire makes one attempt to take a hold of req.Kind: it takes it,
	// re-enters (KindLock, same Owner), completes a retry, or changes
	// nothing. A refusal is Acquired false, with the time until a hold may
	// be free in HolderTTL; not an error.
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
	// ErrInvalidArgument) or a store that cannot be used (any other error):
	// that the namespace makes valid names, and the store is reachable and
	// runs what the store needs. nil when all is well or it cannot tell.
	// The Client calls it at start-up (Client.Check).
	Check(ctx context.Context, namespace string) error
}
