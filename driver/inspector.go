package driver

import (
	"context"
	"time"
)

// Inspector is implemented by stores that can report every hold of a name
// (Client.Inspect, ForceRelease, Observe and Leader need it; without it
// they return an error matching ErrUnsupported).
type Inspector interface {
	// InspectLock reads the live holds of every kind the store keeps under
	// namespace and key (the plain lock's, and the permits, read and write
	// holds of the semaphore and the read-write lock of that name), in one
	// round trip, and changes nothing. A lapsed hold is not in it.
	InspectLock(ctx context.Context, namespace, key string) (LockInfo, error)
}

// LockInfo is the state of one name as the store sees it: its plain lock
// (the fields up to LastFence) and the holds of the semaphore and the
// read-write lock of the same name (Others), which are apart from it.
type LockInfo struct {
	// Key is the lock's name, without namespace.
	Key string
	// Held reports whether the plain lock has a live hold. The fields below
	// up to TTL are zero when it has none. AnyHeld also counts Others.
	Held bool
	// Owner is the holder: its WithOwner value, or the owner token of its
	// one hold without WithOwner.
	Owner string
	// Identity is what the holder's Client gave WithIdentity (host:pid, a
	// pod name), "" when it gave none or the store does not record it.
	Identity string
	// Fence is the holder's fencing token.
	Fence int64
	// Holds are the plain lock's live holds (one, or more when the owner
	// re-entered), sorted by token; each has Kind KindLock and the
	// holder's Fence.
	Holds []HoldInfo
	// TTL is the lock's remaining lease (its longest hold's), measured by
	// the server.
	TTL time.Duration
	// LastFence is the last fencing token minted for the key (0 when the
	// store has no record of one); the next acquisition gets a larger one.
	LastFence int64
	// Others are the live holds of the semaphore (KindSemaphore: one per
	// permit) and of the read-write lock (KindRead, KindWrite) named Key,
	// each with its own fence and lease; sorted by kind, then fence (the
	// order they were taken in). Empty when none is held, or the store
	// keeps neither.
	Others []HoldInfo
}

// AnyHeld reports whether any hold of the name is live: the plain lock's,
// or one of Others.
func (i LockInfo) AnyHeld() bool { return i.Held || len(i.Others) > 0 }

// HoldInfo is one live hold.
type HoldInfo struct {
	Kind  Kind          // what it holds: the plain lock, a permit, a read or the write hold
	Token string        // the hold's owner token (Lock.Token)
	Fence int64         // its fencing token (Lock.Fence); a lock's re-entries share the holder's
	TTL   time.Duration // its remaining lease, measured by the server
}
