// Package fencelock is a distributed lock for Go services that run as
// several instances: it keeps two processes out of the same critical section
// and, through fencing tokens, keeps a process that lost its lock from
// corrupting data.
//
// # Use
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
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
// releases. WithOwner makes acquisitions re-entrant for one owner, and
// WithMaxHold bounds how long a lock can be held, renewals included.
//
// Built on the same lock, each in a file of its own: RunJob runs a
// scheduled job once per tick across instances (job.go); Campaign, Observe
// and Leader elect one leader whose fence is its term (election.go);
// Inspect, ReleaseToken and ForceRelease manage a lock by its key, without
// the *Lock (manage.go); WithIdentity stores who holds each lock (host:pid,
// defaultIdentity) for Inspect and the fencelock command's ls and inspect
// (options.go).
//
// Beside the lock, with holds of their own that are *Lock values too
// (fenced, renewed by the same lease keeper, lost with ErrLost): Semaphore
// allows n holders at a time (semaphore.go), and RWLock lets readers share
// and writers in one at a time, writers first (rwlock.go).
//
// WithHooks makes the Client report acquires (outcome, wait), waits,
// releases (hold time), renewal batches and losses to functions of yours,
// for metrics and tracing (observer.go); the fencelockprom module turns
// them into Prometheus metrics, fencelockotel into OpenTelemetry ones.
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
//     the acquiring or renewing request was sent, less a safety margin (10%
//     of the ttl by default, WithSafetyMargin), so it ends before the
//     server's lease can end. The margin is there for the goroutine that
//     delivers the signal, which a busy process schedules late: a process
//     starved of CPU for longer than the margin can still hear of the loss
//     after another holder has the lock. Held and Err read the clock and are
//     never late. An acquire whose reply arrives after that deadline is not
//     handed out.
//   - Every acquisition gets a fencing token (Fence) strictly greater than
//     every earlier one for the key, minted in the same atomic step as the
//     acquire. A resource that remembers the largest token it accepted and
//     refuses lower ones, in one atomic step with the write, rejects the late
//     write of a stalled holder. That check, not the lease, is what makes
//     the protected data safe.
//   - Requests whose replies were lost never take effect behind the
//     holder's back: lock scripts are never re-sent by the Redis client,
//     renewals never re-create a lapsed lock, and the clean-up of an acquire
//     that gave up leaves a tombstone that refuses a late copy of it.
//     Releases that cannot be confirmed are retried in the background.
//
// On Redis, replication is asynchronous: a failover can lose a lock that was
// just acquired, and two holders can then coexist until the fence check
// separates them. Where correctness must not depend on timing at all, use a
// consensus store (etcd, ZooKeeper) and still fence the writes.
//
// # Errors
//
// Errors match sentinels with errors.Is: ErrNotAcquired (someone else holds
// the lock; a wait that gave up also matches ctx.Err() or ErrClosed),
// ErrUnavailable (the backend could not be reached or did not answer in
// time: an outage, not contention), ErrNotHeld, ErrLost, ErrReleased,
// ErrClosed, and ErrInvalidArgument for bad input, whose message names the
// bad value. A caller whose context ends an acquire gets its context's
// error, with ErrNotAcquired only when the lock was seen held and
// ErrUnavailable only when the attempts failed: a context that had already
// ended gets its own error alone, and no request is sent. Every error is
// one line. A nil context is bad input too: every call that returns an
// error refuses it (ErrInvalidArgument, naming ctx) before it sends
// anything; WithOwner, ownerFromContext and the Context methods, which
// return no error, panic with a message that names the nil context.
//
// During an outage, every call is bounded: TryAcquire by its context and the
// lease it asks for; Acquire and Do by their context and WithWait, or, with
// no deadline at all, by defaultMaxFailures consecutive failures
// (WithMaxFailures); Release by a few seconds, after which it goes on in the
// background.
//
// # Backends
//
// Package driver is the seam between the Client (waiting, renewal, loss
// detection, queuing) and a store. The redisbackend package implements it
// on Redis single node, Sentinel and Cluster.
//
// A store (package driver) keeps plain locks, and may keep the other kinds
// of hold (Semaphore, RWLock) and have capabilities beyond them, found once
// by type assertion: driver.Notifier (waking waiters at once, and Observe
// seeing a new leader at once), driver.Lines (WithFairness, and hand-offs
// to this Client's next waiter), driver.Inspector (Inspect, ForceRelease,
// Observe, Leader) and driver.Ticker (RunJob's record of the last tick
// claimed). A call that needs what the store lacks returns an error
// matching ErrUnsupported.
package fencelock
