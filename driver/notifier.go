package driver

import "context"

// WatchRequest asks for the notifications of one name and kind.
type WatchRequest struct {
	// Ref names what is watched: Kind, Namespace and Key. A Token makes it
	// the watch of that waiter in a line of waiters (Lines): it is then
	// woken when its turn may have come, not when the lock goes to
	// another, and it carries grants (Watch.TakeGrant).
	Ref
	// Changes asks, for KindLock, for a value after an acquisition with
	// Request.Notify takes the lock too, as well as after releases (an
	// election's observer learns of a new leader at once).
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
	// (coalesced) and must be stopped. The rules of
	// ReleaseNotifier.WatchReleases hold for each kind: a release that may
	// let in a waiter whose acquire was refused is notified.
	//
	// A kind or a request the store cannot watch (a turn without Lines,
	// changes it does not publish) gets an error matching ErrUnsupported,
	// before any I/O; the Client then polls, or for Changes watches
	// releases alone.
	Watch(ctx context.Context, req WatchRequest) (*Watch, error)
}
