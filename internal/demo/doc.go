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
//
// Without a Redis URL the demo starts a private redis-server on a free port
// and stops it at the end. With one, it works under a namespace of its own
// (fencelock-demo:RUN:SCENARIO) and deletes its keys afterwards.
package demo
