package driver

import (
	"context"
	"time"
)

// SemaphoreBackend is implemented by backends that keep semaphores
// (Client.Semaphore). The Redis and memory backends do; with a backend that
// lacks it, acquiring a permit fails with an error matching ErrUnsupported.
//
// A semaphore, named by Namespace and Key, is apart from the plain lock and
// the read-write lock of the same name. The contract, per semaphore:
//   - Each permit is a hold with a lease of its own, counted by the store's
//     clock, identified by its Token. A permit whose lease has ended is gone
//     (every call first drops those), so the permits of a crashed holder
//     come back when their leases end, without anyone sweeping.
//   - AcquirePermit is atomic: it takes a permit when fewer than
//     req.Permits permits are live, and mints a fence strictly greater than
//     every fence minted before for the semaphore and than req.FenceFloor,
//     in the same step. Each caller's Permits is its own limit: the count
//     is checked against the Permits of the request being decided.
//   - A Token that holds a live permit is a retry: it succeeds with the
//     same fence, takes no second permit, and sets the lease to TTL from
//     now. Tombstones (ReleaseRequest.Tombstone) refuse a token as for the
//     lock. Owner is ignored: permits are not re-entrant.
//   - ReleasePermit, RenewPermits and PermitTTL act only on the permit of
//     the Token, as Release, Renew and TTL do on a hold of the lock; renewal
//     never re-creates a lapsed permit. ReleaseResult.Remaining is 0.
//   - A refused acquire reports in HolderTTL the time until the earliest
//     live permit's lease ends: a permit may be free by then.
//   - WatchPermits is ReleaseNotifier.WatchReleases for the semaphore: a
//     release of a permit after an acquire was refused must be notified.
//     A backend without notifications returns an error (waiters then poll).
type SemaphoreBackend interface {
	AcquirePermit(ctx context.Context, req PermitRequest) (AcquireResult, error)
	ReleasePermit(ctx context.Context, req ReleaseRequest) (ReleaseResult, error)
	RenewPermits(ctx context.Context, reqs []RenewRequest) ([]RenewResult, error)
	PermitTTL(ctx context.Context, ref LockRef) (time.Duration, error)
	WatchPermits(ctx context.Context, namespace, key string) (*Watch, error)
}

// PermitRequest is one attempt to take a permit of a semaphore.
type PermitRequest struct {
	Request
	// Permits is the caller's number of permits: the attempt succeeds when
	// fewer permits than this are live.
	Permits int
}
