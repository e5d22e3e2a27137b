// Package idempotency runs an operation once per request number, across
// processes: the first request runs it and its result is stored; duplicates
// that arrive while it runs are told it is in progress (an HTTP layer
// answers 409); later duplicates get the stored result, replayed without
// running the operation again.
//
// Two mechanisms work together. A fencelock lock per request number queues
// concurrent duplicates, so normally only one runs. A record per request
// number in a SQL table, with a unique key (scope, request key), is the final
// guard: the operation's writes and the record's "done" state commit in one
// transaction, and that commit succeeds only for the run that owns the
// record, identified by its lock's fencing token. So even if a lock expires
// while its holder still runs (a long GC pause, a partition), and a
// duplicate takes over, at most one run ever commits.
//
// A record moves through these states:
//
//	in_progress  claimed by the run with the record's fence; that run has not
//	             committed (it is running, or it crashed or was cancelled)
//	done         committed; its response is replayed to every duplicate
//	failed       the operation returned an error; nothing was committed
//
// A failed or abandoned (in_progress, lock free) request is run again by the
// next request with the same number: the new run takes the record over with
// its newer fence, and the old run, should it still be alive, can no longer
// commit. Operations whose effects are outside the transaction (an email, a
// payment API) are not covered by that guarantee: make them idempotent
// themselves, for example by passing the request key on.
//
// # Errors
//
// Guard.Do's error says what became of the request; match it with
// errors.Is. For an HTTP API:
//
//   - ErrInProgress (409, retry later): another run of the same request
//     holds its lock. A duplicate arrived while the first run was going on,
//     and WithWait, if set, ran out before it finished.
//   - ErrUnavailable (503, retry later): the lock service (Redis) or the
//     record store (the database) could not be reached or did not answer in
//     time, so Do could not tell whether the request is new, in progress or
//     done. When the lock service was the cause the error also matches
//     fencelock.ErrUnavailable. An outage is never reported as
//     ErrInProgress.
//   - ErrSuperseded (409, retry later): this run lost its lock and a newer
//     run of the same request took the record over. Nothing of this run was
//     committed; the newer run's result is replayed to later duplicates.
//   - op's own error, as op returned it: nothing was committed, the record
//     is marked failed, and the next request with the same key runs op
//     again. If the request's lock was lost while op ran, op's context was
//     cancelled with cause fencelock.ErrLost, which op typically returns.
//   - ErrPayloadMismatch (422, do not retry): the request key was first
//     used with another payload (WithFingerprint); nothing was run.
//   - ErrInvalidArgument (400): a scope or request key that cannot be
//     stored (empty, longer than MaxKeyLen bytes, invalid UTF-8, or with a
//     NUL byte, which PostgreSQL refuses), a nil operation, a bad option.
//     It also matches fencelock.ErrInvalidArgument.
//   - anything else: an error of ctx (the caller gave up), or a store
//     query that failed for another reason than an outage.
//
// A retry after ErrUnavailable is safe: a run that committed before the
// outage is replayed, and one that did not is run again, at most once.
//
// # One key, one payload
//
// Without a fingerprint, a duplicate gets the first response whatever it
// carries. Pass WithFingerprint(payload) to Do, the request's content in a
// canonical form: the record keeps its SHA-256, and a later request with
// the same key and another payload gets ErrPayloadMismatch instead of a
// response that answers a different request.
//
// # What is kept, and for how long
//
// Each request leaves two things behind:
//
//   - its record in the SQL table, until Store.Purge deletes it. Run Purge
//     periodically (from one instance: Client.RunJob) with an age longer
//     than clients retry a request (a day is common): a request whose
//     record was purged runs again if it comes back.
//   - in Redis, its lock's fence counter (the lock itself goes at release).
//     With redisbackend's defaults a counter never expires, so one key per
//     request number piles up forever. Build the backend with
//     redisbackend.WithFenceCounterExpiry (24h, say) for the lock client
//     a Guard uses: idle counters then expire, and a counter made again
//     starts from the server's clock in microseconds, above every fence
//     handed out before, so records keep being taken over only by newer
//     runs. The counter's key is
//     "<namespace>:{idempotency:<len(scope)>:<scope>:<key>}:fence".
package idempotency

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencelock/fencelock"
)

// ErrInProgress is returned while another run of the same request holds it.
var ErrInProgress = errors.New("idempotency: request in progress")

// ErrUnavailable is returned when the lock service or the record store
// could not be reached or did not answer in time: Do could not learn or
// change the state of the request. It is distinct from ErrInProgress (an
// outage is not a duplicate); answer "unavailable, retry later".
//
// When the lock service was the cause, the error wraps the lock client's
// error and so also matches fencelock.ErrUnavailable (errors.Is(err,
// fencelock.ErrUnavailable) is true). When the record store was, it wraps
// the database driver's error and does not match fencelock.ErrUnavailable.
var ErrUnavailable = errors.New("idempotency: lock service or record store unavailable")

// ErrSuperseded is returned to a run whose record was taken over by a newer
// run (its lock was lost meanwhile); nothing of it was committed.
var ErrSuperseded = errors.New("idempotency: run superseded by a newer one")

// Operation is the work done once per request. It writes through tx, which
// commits together with the record; its response is stored and replayed to
// duplicates. ctx is cancelled (cause fencelock.ErrLost) if the lock is lost,
// and tx is rolled back with it.
//
// Do opens tx before calling the operation, so the operation runs while
// holding a database connection (and, on SQLite, the write lock). Take any
// other lock the operation needs (a per-product lock, say) before calling
// Do, not inside the operation: that keeps the lock order the same
// everywhere and no one waits for a lock while holding the database.
type Operation func(ctx context.Context, tx *sql.Tx) (response []byte, err error)

// Result is the outcome of Guard.Do.
type Result struct {
	Response []byte
	Replayed bool // the response was stored by an earlier run
}

// Guard runs operations at most once per (scope, request key).
type Guard struct {
	locks   *fencelock.Client
	store   *Store
	lockTTL time.Duration
	wait    time.Duration
}

// Option configures a Guard.
type Option func(*Guard)

// WithLockTTL sets the lease of the per-request lock (default 30s; it is
// renewed while the operation runs).
func WithLockTTL(ttl time.Duration) Option { return func(g *Guard) { g.lockTTL = ttl } }

// WithWait makes a duplicate wait up to d for a run in progress, and then
// replay its result, instead of failing at once with ErrInProgress (the
// default: a duplicate arriving while the first request runs is told so at
// once, for a 409).
func WithWait(d time.Duration) Option { return func(g *Guard) { g.wait = d } }

// New returns a Guard that locks through locks and keeps records in store.
func New(locks *fencelock.Client, store *Store, opts ...Option) *Guard {
	g := &Guard{locks: locks, store: store, lockTTL: 30 * time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(g)
		}
	}
	return g
}

// Do runs op once for (scope, key). It returns op's response (Replayed
// false), or the response an earlier run stored (Replayed true), or
// ErrInProgress while another run holds the request, or ErrUnavailable when
// the lock service or the record store could not be reached (matching
// fencelock.ErrUnavailable too when the lock service was the cause), or
// op's error (the request is then marked failed and may be retried), or
// ErrSuperseded, or ErrPayloadMismatch (WithFingerprint), or an error
// matching ErrInvalidArgument for a scope or key that cannot be stored
// (empty, longer than MaxKeyLen, invalid UTF-8, a NUL byte). The package
// doc says what each means.
func (g *Guard) Do(ctx context.Context, scope, key string, op Operation, opts ...DoOption) (Result, error) {
	if err := checkKey("scope", scope); err != nil {
		return Result{}, err
	}
	if err := checkKey("request key", key); err != nil {
		return Result{}, err
	}
	if op == nil {
		return Result{}, invalid("operation", nil, "must not be nil")
	}
	if g.locks == nil {
		return Result{}, invalid("lock client", nil, "New needs a *fencelock.Client")
	}
	if g.store == nil {
		return Result{}, invalid("store", nil, "New needs a *Store (NewStore)")
	}
	if g.lockTTL < fencelock.MinTTL {
		return Result{}, invalid("WithLockTTL", g.lockTTL, "must be at least fencelock.MinTTL ("+fencelock.MinTTL.String()+")")
	}
	if g.wait < 0 {
		return Result{}, invalid("WithWait", g.wait, "must not be negative")
	}
	var c call
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}

	// Fast path: a finished request is replayed without taking the lock,
	// and a key used with another payload is refused whatever its state.
	if rec, err := g.store.get(ctx, scope, key); err != nil {
		return Result{}, err
	} else if mismatch(rec.fingerprint, c.fingerprint) {
		return Result{}, fmt.Errorf("%w: %s %q", ErrPayloadMismatch, scope, key)
	} else if rec.state == stateDone {
		return Result{Response: rec.response, Replayed: true}, nil
	}

	lk, err := g.locks.Acquire(ctx, lockKey(scope, key), g.lockTTL,
		fencelock.WithWait(g.wait), fencelock.WithAutoRenew(g.lockTTL/3))
	switch {
	case err == nil:
	case errors.Is(err, fencelock.ErrUnavailable):
		// Redis could not be reached: whether another run holds the
		// request is unknown, so this is no "in progress".
		return Result{}, fmt.Errorf("%w: %s %q: %w", ErrUnavailable, scope, key, err)
	case errors.Is(err, fencelock.ErrNotAcquired) && ctx.Err() == nil:
		// Found held by another run (fencelock reports an outage as
		// ErrUnavailable, never as ErrNotAcquired).
		return Result{}, fmt.Errorf("%w: %s %q", ErrInProgress, scope, key)
	default:
		return Result{}, err
	}
	defer lk.Release(ctx)

	rec, claimed, err := g.store.claim(ctx, scope, key, lk.Fence(), c.fingerprint)
	if err != nil {
		return Result{}, err
	}
	if !claimed {
		switch {
		case mismatch(rec.fingerprint, c.fingerprint):
			return Result{}, fmt.Errorf("%w: %s %q", ErrPayloadMismatch, scope, key)
		case rec.state == stateDone:
			return Result{Response: rec.response, Replayed: true}, nil
		}
		return Result{}, fmt.Errorf("%w: %s %q", ErrSuperseded, scope, key)
	}

	opCtx, cancel := lk.Context(ctx)
	defer cancel()
	response, err := g.store.run(opCtx, scope, key, lk.Fence(), op)
	if err != nil {
		return Result{}, err
	}
	return Result{Response: response}, nil
}

// Lookup tells what became of (scope, key) without running or locking
// anything, from the record alone: the stored response of a finished
// request (found true, Replayed true), ErrPayloadMismatch when the key was
// used with another payload (WithFingerprint), ErrInProgress while a run
// has claimed the request and not finished, or found false for a request
// never seen or whose run failed (Do would run it). A service uses it to
// answer a duplicate that cannot wait for a lock, or to show a request's
// result.
func (g *Guard) Lookup(ctx context.Context, scope, key string, opts ...DoOption) (res Result, found bool, err error) {
	if err := checkKey("scope", scope); err != nil {
		return Result{}, false, err
	}
	if err := checkKey("request key", key); err != nil {
		return Result{}, false, err
	}
	if g.store == nil {
		return Result{}, false, invalid("store", nil, "New needs a *Store (NewStore)")
	}
	var c call
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	rec, err := g.store.get(ctx, scope, key)
	switch {
	case err != nil:
		return Result{}, false, err
	case mismatch(rec.fingerprint, c.fingerprint):
		return Result{}, false, fmt.Errorf("%w: %s %q", ErrPayloadMismatch, scope, key)
	case rec.state == stateDone:
		return Result{Response: rec.response, Replayed: true}, true, nil
	case rec.state == stateInProgress:
		return Result{}, false, fmt.Errorf("%w: %s %q", ErrInProgress, scope, key)
	}
	return Result{}, false, nil
}

// lockKey names the lock of one request. The scope's length goes first so
// that scopes and keys containing ':' cannot make two requests share a lock
// ("a:b" + "c" and "a" + "b:c").
func lockKey(scope, key string) string {
	return "idempotency:" + strconv.Itoa(len(scope)) + ":" + scope + ":" + key
}
