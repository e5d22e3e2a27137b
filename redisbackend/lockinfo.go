package redisbackend

import (
	"context"

	"github.com/fencelock/fencelock/driver"
)

// InspectLock implements driver.Inspector (Client.Inspect and
// Client.ForceRelease) with Inspect: one round trip, nothing changed.
func (b *Backend) InspectLock(ctx context.Context, namespace, key string) (driver.LockInfo, error) {
	info, err := b.Inspect(ctx, namespace, key)
	if err != nil {
		return driver.LockInfo{}, err
	}
	return info.LockInfo, nil
}
