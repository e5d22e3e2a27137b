// Package fencelock is a distributed lock for Go services that run as
// several instances: it keeps two processes out of the same critical section
// and, through fencing tokens, keeps a process that lost its lock from
// corrupting data.
//
// # Use
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	locks := fencelock.New(redisbackend.New(rdb))
//	defer locks.Close()
//
//	err := locks.Do(ctx, "product:42", 10*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
//		// ctx is cancelled (cause ErrLost) the moment the lock is lost.
//		return store.Deduct(ctx, 42, 1, lk.Fence())
//	})
//
// TryAcquire makes one attempt; Acquire waits (until the context ends, the
// WithWait bound passes, or Close); Do waits, renews while fn runs, and
// releases. WithOwner makes acquisitions re-entrant for one owner.
//
// # What a lease guarantees, and what fencing adds
//
// A lock is a lease: the server frees it when its ttl runs out without a
// renewal, so a crashed holder cannot block the others forever. The price is
// that a holder that is paused (a GC pause, SIGSTOP, a frozen VM) or cut off
// from the server can outlive its lease while it still believes it holds the
// lock; another process then takes the lock, and both act. No lock service
// can prevent that by itself.
//
// fencelock narrows it and closes it:
//   - The holder learns of a loss: Done is closed, Err returns ErrLost, and
//     Do's context is cancelled with cause ErrLost, when renewal finds the
//     lock gone or when the local lease deadline passes without a successful
//     renewal. That deadline is measured on the monotonic clock from before
//     the acquiring or renewing request was sent, less 0.1% of the ttl for
//     clock-rate differences, so it ends before the server's lease. Held
//     reports this local view.
//   - Every acquisition gets a fencing token (Fence) strictly greater than
//     every earlier one for the key, minted in the same atomic step as the
//     acquire. A resource that remembers the largest token it accepted and
//     refuses lower ones, in one atomic step with the write, rejects the late
//     write of a stalled holder. That check, not the lease, is what makes
//     the protected data safe.
//
// On Redis, replication is asynchronous: a failover can lose a lock that was
// just acquired, and two holders can then coexist until the fence check
// separates them. Where correctness must not depend on timing at all, use a
// consensus store (etcd, ZooKeeper) and still fence the writes.
//
// # Errors
//
// Errors match sentinels with errors.Is: ErrNotAcquired (taken, or a wait
// that gave up; the latter also matches ctx.Err() or ErrClosed), ErrNotHeld,
// ErrLost, ErrReleased, ErrClosed, and ErrInvalidArgument for bad input,
// whose message names the bad value.
//
// # Backends
//
// The Backend interface is the seam between the Client (waiting, renewal,
// loss detection, queuing) and a store. The redisbackend package implements
// it on Redis single node, Sentinel and Cluster.
package fencelock
