package driver

import "time"

// Ref names one hold: its kind, its name and its owner token.
type Ref struct {
	// Kind is the kind of hold (the zero value is the plain lock). The
	// plain lock, the semaphore and the read-write lock of one name are
	// apart: a request of one kind never sees the holds of another.
	Kind      Kind
	Namespace string // prefix of every key of the lock (Client's WithNamespace)
	Key       string // the lock's name as the user gave it
	Token     string // the random owner token of this acquisition
}

// Request is one acquire attempt of a hold of any kind.
type Request struct {
	Ref
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
	// operators (host:pid, a pod name), "" when not set. A store that
	// records it stores it with a lock this request takes while free,
	// keeps it on re-entry, and returns it in LockInfo.Identity; it has no
	// part in ownership. Stores that do not record it ignore it.
	Identity string
	// Notify asks a Notifier to wake the lock's change
	// watchers when this request takes the lock (not on re-entry): others
	// watch the lock without waiting for it (Observe watches an election,
	// and learns of a new leader at once). Campaign sets it. Other stores
	// ignore it.
	Notify bool
	// Permits is, for KindSemaphore, the caller's number of permits: the
	// attempt succeeds when fewer permits than this are live. Each caller's
	// Permits is its own limit. Other kinds ignore it.
	Permits int
	// Place is, for KindRead and KindWrite, how long a refused attempt
	// keeps the caller's place: a writer's intent, which keeps new readers
	// out, or a reader's place among those admitted when the writer
	// releases (at most PlaceLease). 0: no place (a single attempt). Other
	// kinds ignore it.
	Place time.Duration
}

// Result is the outcome of one acquire attempt.
type Result struct {
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
	// Validity, when positive, is the lease the store guarantees in place
	// of TTL, counted from before the request was sent; the Client's local
	// deadline is then based on it. A store whose lease is not exactly
	// TTL says so here: shorter (a quorum of servers whose clocks drift, as
	// in the redlock package) or longer (a store that rounds leases up).
	// Zero means TTL.
	Validity time.Duration
}

// ReleaseRequest gives up one hold.
type ReleaseRequest struct {
	Ref
	// Tombstone, when positive, is how long the store must refuse an
	// Acquire with this Token after the release, whether or not the release
	// found the hold: an acquire request of the token whose reply was lost
	// may still arrive, and must not take the lock for nobody.
	Tombstone time.Duration
	// Notify asks a Notifier to wake the watchers of the
	// lock's releases when this release frees the lock (or hands it on),
	// even if no acquire was refused while it was held: others watch the
	// hold without waiting for it (Observe watches an election's leader,
	// and learns of a resignation at once). Other stores ignore it.
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
	// it. Stores without such a line leave it false.
	Yielded bool
}

// RenewRequest extends one hold's lease.
type RenewRequest struct {
	Ref
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
	// Result.Validity). Zero means TTL.
	Validity time.Duration
}
