package redisbackend

import (
	"context"

	"github.com/fencelock/fencelock"
)

var _ fencelock.LockInspector = (*Backend)(nil)

// InspectLock implements fencelock.LockInspector (Client.Inspect and
// Client.ForceRelease) with Inspect: one round trip, nothing changed.
func (b *Backend) InspectLock(ctx context.Context, namespace, key string) (fencelock.LockInfo, error) {
	info, err := b.Inspect(ctx, namespace, key)
	if err != nil {
		return fencelock.LockInfo{}, err
	}
	return info.LockInfo, nil
}
