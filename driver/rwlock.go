package driver

import (
	"context"
	"time"
)

// RWLockBackend is implemented by backends that keep read-write locks
// (Client.RWLock). The Redis and memory backends do; with a backend that
// lacks it, acquiring fails with an error matching ErrUnsupported.
//
// A read-write lock, named by Namespace and Key, is apart from the plain
// lock and the semaphore of the same name. The contract, per read-write
// lock:
//   - Every hold, read or write, has a lease of its own counted by the
//     store's clock and is identified by its Token; a hold whose lease has
//     ended is gone (every call first drops those, and every place below
//     whose lease has ended).
//   - A refused attempt with req.Place > 0 registers (or renews) the
//     caller's place for Place from now: a writer's intent, or a reader's
//     place among the readers waiting. A release by the Token, and taking
//     the lock, withdraw it; a release that finds only a place reports
//     Held false.
//   - AcquireRW is atomic. A writer gets the lock only when no hold is live
//     and no admitted reader (below) is live. A reader gets it when it is
//     admitted, or when no writer holds the lock and no writer's intent is
//     live (writers are preferred). The release of the writer admits every
//     reader then waiting (each for the rest of its place's lease), so that
//     readers and writers take turns and neither starves the other. Each
//     grant mints a fence strictly greater than every fence minted before
//     for the lock (readers and writers share one counter) and than
//     req.FenceFloor, in the same step.
//   - A Token that holds a live hold is a retry: it succeeds with the same
//     fence and sets the lease to TTL from now. Tombstones refuse a token
//     as for the lock, and drop its place. Owner is ignored: holds are not
//     re-entrant.
//   - ReleaseRW, RenewRW and RWTTL act only on the Token's hold, as
//     Release, Renew and TTL do on a hold of the lock; renewal never
//     re-creates a lapsed hold. ReleaseResult.Remaining is 0.
//   - A refused acquire reports in HolderTTL the time until the lock may
//     let it in: for a writer, until the last live hold's or admitted
//     reader's lease ends; for a reader, until the writer's lease or the
//     earliest intent ends.
//   - WatchRW delivers a value when a release may let a waiter in: the
//     writer's release, the last reader's release, the withdrawal of the
//     last intent or of the last admitted reader, after an acquire was
//     refused. A backend without notifications returns an error (waiters
//     then poll).
type RWLockBackend interface {
	AcquireRW(ctx context.Context, req RWRequest) (AcquireResult, error)
	ReleaseRW(ctx context.Context, req ReleaseRequest) (ReleaseResult, error)
	RenewRW(ctx context.Context, reqs []RenewRequest) ([]RenewResult, error)
	RWTTL(ctx context.Context, ref LockRef) (time.Duration, error)
	WatchRW(ctx context.Context, namespace, key string) (*Watch, error)
}

// RWRequest is one attempt to take a read-write lock.
type RWRequest struct {
	Request
	// Write asks for the exclusive (write) hold; false asks for a shared
	// (read) hold.
	Write bool
	// Place is how long a refused attempt keeps the caller's place: a
	// writer's intent, which keeps new readers out, or a reader's place
	// among those admitted when the writer releases. 0: no place (a single
	// attempt).
	Place time.Duration
}
