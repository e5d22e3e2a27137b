package driver

import "context"

// Inspector is implemented by stores that can report every hold of a name
// (Client.Inspect, ForceRelease, Observe, Leader need it).
type Inspector interface {
	// InspectLock reads the live holds of every kind the store keeps under
	// namespace and key, in one round trip, and changes nothing.
	InspectLock(ctx context.Context, namespace, key string) (LockInfo, error)
}
