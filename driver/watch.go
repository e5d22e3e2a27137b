package driver

import (
	"context"
)

// ReleaseNotifier is implemented by backends that can tell waiters at once
// that a lock was released (Redis pub/sub). Without it, a Client waits by
// polling with jittered backoff, bounded by the holder's remaining lease.
type ReleaseNotifier interface {
	// WatchReleases registers interest in releases of the named lock. It
	// returns once the backend is ready to deliver them (or ctx ends, or a
	// short readiness timeout passes: a notification is a hint, the waiter
	// keeps its fallback timer). The returned Watch delivers a value on C
	// after a release (coalesced: one pending value at most) and must be
	// stopped.
	//
	// A backend must notify of a release that frees a lock for which an
	// acquire was refused since it was taken (the Client's waiters make one
	// after they start watching); it may skip releases nobody waited for,
	// as the Redis backend does, and may notify more often.
	WatchReleases(ctx context.Context, namespace, key string) (*Watch, error)
}

// ChangeNotifier is implemented by ReleaseNotifier backends that can also
// tell watchers that a lock was taken (by an acquisition with
// AcquireRequest.Notify): Observe uses it to learn of a new leader at once,
// where a release watch alone would leave it to its next look.
type ChangeNotifier interface {
	ReleaseNotifier
	// WatchChanges is WatchReleases whose Watch also delivers a value after
	// an acquisition with AcquireRequest.Notify takes the lock. A
	// WatchReleases watch need not deliver those: its waiters would only
	// wake to find the lock taken.
	WatchChanges(ctx context.Context, namespace, key string) (*Watch, error)
}

// Watch is a registration for release (or change) notifications of one
// lock, made by a ReleaseNotifier (or ChangeNotifier).
type Watch struct {
	// C receives a value after the watched lock is released (and, for a
	// ChangeNotifier's WatchChanges, after an acquisition with
	// AcquireRequest.Notify takes it), or when the notifier may have missed
	// a notification (reconnection). It is never closed.
	C <-chan struct{}
	// stop unregisters the watch; set by the notifier.
	stop func()
	// takeGrant returns and forgets a grant announced to the watching
	// waiter (FairGranter); nil for a watch that never carries grants.
	takeGrant func() (Grant, bool)
}

// NewWatch is for ReleaseNotifier implementations: it makes a Watch that
// delivers on c and calls stop (once) when the watch is stopped.
func NewWatch(c <-chan struct{}, stop func()) *Watch { return &Watch{C: c, stop: stop} }

// NewGrantWatch is NewWatch for a FairGranter's WatchTurn: take returns,
// and forgets, the grant announced to the waiter since the last call (a
// value is also sent on c when one is announced).
func NewGrantWatch(c <-chan struct{}, stop func(), take func() (Grant, bool)) *Watch {
	return &Watch{C: c, stop: stop, takeGrant: take}
}

// TakeGrant returns, and forgets, the grant a release made to the watching
// fair waiter (see FairGranter); ok is false when there is none.
func (w *Watch) TakeGrant() (g Grant, ok bool) {
	if w == nil || w.takeGrant == nil {
		return Grant{}, false
	}
	return w.takeGrant()
}

// Stop unregisters the watch. It is safe to call more than once.
func (w *Watch) Stop() {
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
}
