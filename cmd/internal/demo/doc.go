// Package demo is "fencelock demo": one master process and W worker
// processes (the same binary, re-executed) contending for one lock on a real
// Redis, in scenarios that show what a lease guarantees, what it does not,
// and what fencing adds.
//
// # An iteration
//
// Each worker runs its iterations one after the other:
//
//  1. Acquire the lock (waiting; through connection errors too).
//  2. Enter: INCR the shared "inside" counter in Redis (it must return 1)
//     and publish "pid worker fence" in a holder key, in one Lua script.
//  3. Write to the fenced store with the lock's fence.
//  4. Hold for the scenario's time (a loss signal ends the hold, except in
//     expiry, where workers ignore it on purpose).
//  5. Write to the fenced store again, with the same fence.
//  6. Exit: DECR the counter (it must return 0), in one Lua script.
//  7. Release.
//
// It reports each step to the master as a JSON line on its stdout; a worker
// that is killed just stops talking, and the master keeps what it had heard.
//
// # How the demo measures overlap
//
// The check must not itself be the weak point, so overlap is measured twice,
// independently:
//
//   - The "inside" counter lives in Redis and is updated atomically by the
//     entry and exit scripts (INCR/DECR on the server, never read-modify-
//     write in a client). An INCR that does not return 1 or a DECR that does
//     not return 0 is a violation. A restart of redis-server wipes the
//     counter, so the scripts carry an epoch that the master sets and bumps
//     after the restart; iterations that straddle it are "interrupted", not
//     judged.
//   - Every worker stamps the start (Acquire returned) and the end (Release
//     about to be called) of each hold with CLOCK_MONOTONIC, read through
//     clock_gettime. On Linux that clock is one for the whole machine, so
//     stamps from different processes compare; Go's time.Now monotonic
//     reading is relative to each process's start and would not. The master
//     gathers the intervals at the end and sweeps them to find the most that
//     overlapped: "max concurrent holders seen". With a working lock the
//     intervals cannot overlap, since the next Acquire returns only after
//     the server processed the previous Release.
//
// Stale writes are judged the same way. The store's refusals (fence.ErrStale)
// are counted as stale writes attempted; an accepted write is counted as a
// stale write accepted when a write with a larger fence had been accepted
// and had returned before it started, so that the store saw the two in that
// order and had to refuse it. Writes that merely overlap in time are never
// blamed on the store.
//
// # Scenarios
//
//   - mutex: lease 5s, hold 50ms, no renewal: no overlap, no stale write.
//   - expiry: lease 300ms, hold 900ms, no renewal, loss signals ignored:
//     holders overlap, their late writes are refused, none accepted.
//   - renew: lease 300ms, hold 900ms, renewal every 100ms: no overlap.
//   - pause: lease 500ms, hold 300ms, renewal every 150ms; the master
//     SIGSTOPs holders (found through the holder key) for 2 x lease: each is
//     told of the loss when it runs again, its late writes are refused, and
//     another worker has the lock within lease + 100ms.
//   - crash: the master kill -9s holders mid-hold: the lock is free again
//     within the lease and the other workers complete every iteration.
//   - restart: the master kill -9s redis-server (no persistence) mid-run and
//     starts it again empty: fences keep increasing (they are floored by the
//     server clock) and no stale write is accepted. The fenced store must
//     survive the restart, so it is SQLite even with --store redis. Only
//     with the demo's private server; skipped with an external Redis.
//   - fair: the fair lock (fencelock.WithFairness). 4 worker processes of
//     4 goroutines each (whatever --workers says), one Client per process,
//     hold 1ms, think 1ms between turns, lease 2s; every iteration is the
//     usual one above. Three runs with the same processes: plain Acquire
//     for 2s, WithFairness for 2s, and WithFairness again while the master
//     kill -9s a worker process whose 4 goroutines all wait in the line on
//     the server (it finds them by their owner tokens, which name the
//     process; it SIGSTOPs the process first, so that the line it checks
//     is the line it kills in). The first two are compared: hand-offs per
//     second, wait p50/p99 (Acquire called -> returned) against the ideal
//     (N-1) x hold (N = 16, hold measured: the 1ms plus the checks' round
//     trips), turns per worker min/max; reported against the fair lock's
//     targets, not judged. FAIL on overlap, a stale write, a fence that is
//     not above every earlier one, or a lost hand-off: after the kill the
//     line stalls until the dead waiters' places lapse
//     (driver.PlaceLease); a stall longer than that plus 3s, or no
//     acquisition once the places have lapsed, fails.
//   - semaphore, rwlock, election, jobs: the primitives, each with
//     worker processes of its own (whatever --workers says; prims.go has
//     the details). semaphore: 4 processes x 3 goroutines on a 3-permit
//     Client.Semaphore, lease 2s, hold 20ms, for 2s; then the master kill
//     -9s a process holding a permit and watches the permit on the server
//     until it is gone (after its lease). rwlock: 4 processes x (1 writer +
//     3 readers) on a Client.RWLock for 3s, readers holding 30ms and back
//     10ms later (nearly always one inside), writers holding 10ms: readers
//     overlap, writers get in past them. election: 4 processes campaign,
//     the leader leads 300ms (writing its term to the fenced store every
//     50ms) and resigns; after 2s the master kill -9s the leader and waits
//     for the next; Client.Observe watches throughout. jobs: 3 processes
//     call RunJob every second for 6 ticks (--iterations), their
//     schedulers 0/20/40ms late plus up to 60ms of jitter, and, on another
//     key, the plain TryAcquire-run-Release pattern; runs are counted per
//     tick on the server. Every holder counts itself in on the server (a
//     set per kind, its size read in the same script) and its interval is
//     swept as above; fences must rise in happens-before order; writes are
//     fenced. FAIL on more holders than the rule allows (3 permits, a
//     writer alone, one leader), a fence regression, a stale write
//     accepted, a tick RunJob ran twice, or a kill never recovered from
//     (the permit still there, or no new leader, 3s after the dead hold's
//     lease); rates, waits, hand-overs and the plain pattern's runs are
//     figures.
//   - failover: the lock lives on a private Sentinel group (1 master, 2
//     replicas, 3 sentinels); lease 4s, renewal every 1s, hold 100ms. The
//     workers iterate until the master has done its failovers (3, or
//     --failovers): it waits until a worker holds the lock (that "victim"
//     holds on), stalls the replicas (SIGSTOP, replication link cut), kill
//     -9s the master 2s later, resumes the replicas, waits for the
//     promotion, restarts the old master as a replica, and lets the victim
//     go once its lease as of the kill is over. Without --replica-ack the
//     renewals in the stall count for the victim but are not on the
//     promoted replica, so another worker may acquire the lock before the
//     victim hears of it: a lock lost silently, shown as such, and a PASS
//     as long as the fence refused every stale write and no fence went
//     backwards. With --replica-ack N (redisbackend.WithReplicaAck) those
//     renewals do not count, the victim is told at its local deadline, and
//     a lock lost silently, or any overlap, is a FAIL. The lease is longer
//     than a failover (2-3 s here): with a shorter one the victim is told
//     by its own deadline before any replica is promoted, ack or not.
//   - cluster-failover: the same on a private Cluster of 3 masters with a
//     replica each; the master killed is the one that serves the lock key.
//
// In the failover scenarios only the lock is on the replicated Redis: the
// inside counter and the holder key stay on the demo's own redis-server
// (the referee), which no failover touches, and the fenced store is SQLite
// (or PostgreSQL with --store postgres). They also report locks lost
// silently (another worker acquired while the victim had no loss signal
// yet), victims told and kept, fence regressions (a fence not above every
// fence handed out before it, in the order the Acquires returned), the
// ghost-lock time after a release (release returned -> a waiting worker's
// Acquire returned: hand-off latency with a working lock, the lease's
// remainder with a release the failover lost), and the time from each kill
// -9 until the next Acquire returned. They run only with the demo's
// private servers; skipped with an external Redis.
//
// # Other backends
//
// With Config.Backend ("fencelock demo --backend redlock|etcd") only the
// lock moves: to 3 or 5 private redis-servers under a Redlock quorum
// (redlock.go), or to a private 3-member etcd cluster (etcd.go; the
// Backend itself is in cmd/etcddemo, so that etcd's client stays out of
// the fencelock command). The referee and the fenced store stay on
// the demo's redis-server, and the master probes the lock through the
// store (LockStore.Fence). A Backend adapts each scenario (Backend.Adapt):
// etcd's leases are whole seconds with a 1 s minimum, and it revokes
// expired leases up to 500 ms late (Scenario.ExpirySlack); restart kill
// -9s a minority of the Redlock masters, kept down longer than the lease,
// or every etcd member, and must not let two hold the lock
// (Scenario.RestartSafe); on etcd the lock held across it must be kept
// (Scenario.KeepsLocks). The failover scenarios are Redis-only, and the
// fair lock and the primitives, whose checks read the lock's Redis keys,
// are skipped with the reason.
//
// Without a Redis URL the demo starts a private redis-server on a free port
// and stops it at the end. With one, it works under a namespace of its own
// (fencelock-demo:RUN:SCENARIO) and deletes its keys afterwards.
package demo
