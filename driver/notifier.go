package driver

import "context"

// WatchRequest asks for the notifications of one name and kind.
type WatchRequest struct {
	// Ref names what is watched: Kind, Namespace and Key. A Token makes it
	// the watch of that waiter in a line of waiters (Lines): it is then
	// woken when the lock is free and the waiter may be first in line, or
	// when a notification may have been missed; not when the lock goes to
	// another waiter. It carries grants (Watch.TakeGrant).
	Ref
	// Changes asks, for KindLock, for a value after an acquisition with
	// Request.Notify takes the lock too, as well as after releases (an
	// election's observer learns of a new leader at once). A watch without
	// it need not deliver those: its waiters would only wake to find the
	// lock taken.
	Changes bool
}

// Notifier is implemented by stores that can tell waiters at once that a
// hold was released (Redis pub/sub, etcd watches). Without it, a Client
// waits by polling with jittered backoff, bounded by the holder's
// remaining lease.
type Notifier interface {
	// Watch registers interest in req's releases, and returns once the
	// store is ready to deliver them (or ctx ends, or a short readiness
	// timeout passes: a notification is a hint, the waiter keeps its
	// fallback timer). The Watch delivers a value on C after a release
	// (coalesced) and must be stopped.
	//
	// A store must notify of a release that may let in a waiter whose
	// acquire was refused since the hold was taken (the Client's waiters
	// make one after they start watching): for a read-write lock, the
	// writer's release, the last reader's, and the withdrawal of the last
	// intent or admitted reader. It may skip releases nobody waited for,
	// and may notify more often.
	//
	// A kind or a request the store cannot watch gets an error matching
	// ErrUnsupported, before any I/O; the Client then polls.
	Watch(ctx context.Context, req WatchRequest) (*Watch, error)
}

// Watch is a registration for the notifications of one name and kind, made
// by a Notifier.
type Watch struct {
	// C receives a value after a watched release (and, with Changes, after
	// an acquisition with Request.Notify), or when the notifier may have
	// missed a notification (reconnection). It is never closed.
	C <-chan struct{}
	// stop unregisters the watch; set by the notifier.
	stop func()
	// takeGrant returns and forgets a grant announced to the watching
	// waiter (Lines); nil for a watch that never carries grants.
	takeGrant func() (Grant, bool)
}

// NewWatch is for Notifier implementations: it makes a Watch that delivers
// on c and calls stop (once) when the watch is stopped.
func NewWatch(c <-chan struct{}, stop func()) *Watch { return &Watch{C: c, stop: stop} }

// NewGrantWatch is NewWatch for the watch of a waiter in a line that
// accepts grants: take returns, and forgets, the grant announced to the
// waiter since the last call (a value is also sent on c when one is
// announced).
func NewGrantWatch(c <-chan struct{}, stop func(), take func() (Grant, bool)) *Watch {
	return &Watch{C: c, stop: stop, takeGrant: take}
}

// TakeGrant returns, and forgets, the grant a release made to the watching
// waiter (see Turn.Grant); ok is false when there is none.
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
