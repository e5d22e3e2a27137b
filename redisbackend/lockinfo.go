package redisbackend

import (
	"context"

	"github.com/fencelock/fencelock"
)

var _ fencelock.LockInspector = (*Backend)(nil)

// InspectLock implements fencelock.LockInspector (Client.Inspect and
// Client.ForceRelease) with Inspect: one round trip, nothing changed.
func (b *Backend) InspectLock(ctx context.Context, namespace, key string) (fencelock.LockInfo, error) {
	raw, err := b.Inspect(ctx, namespace, key)
	if err != nil {
		return fencelock.LockInfo{}, err
	}
	info := fencelock.LockInfo{Key: key, Held: raw.Held, LastFence: raw.LastFence}
	if !raw.Held {
		return info, nil
	}
	info.Owner, info.Identity, info.Fence, info.TTL = raw.Owner, raw.Identity, raw.Fence, raw.TTL
	for _, token := range raw.Tokens { // sorted
		info.Holds = append(info.Holds, fencelock.HoldInfo{Token: token, TTL: raw.HoldLeases[token]})
	}
	return info, nil
}
