package memorybackend

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/fencelock/fencelock"
)

var _ fencelock.LockInspector = (*Backend)(nil)

// InspectLock implements fencelock.LockInspector. It is a call of no Op:
// faults and Pause do not affect it, and it is not counted.
func (b *Backend) InspectLock(ctx context.Context, namespace, key string) (fencelock.LockInfo, error) {
	if err := checkKey(key); err != nil {
		return fencelock.LockInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return fencelock.LockInfo{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fencelock.LockInfo{}, ErrClosed
	}
	info := fencelock.LockInfo{Key: key}
	l := b.locks[lockID{namespace, key}]
	if l == nil {
		return info, nil
	}
	l.prune(now)
	info.LastFence = l.counter
	if len(l.holds) == 0 {
		return info, nil
	}
	info.Held, info.Owner, info.Identity, info.Fence = true, l.owner, l.identity, l.fence
	for _, h := range l.holds {
		ttl := h.end.Sub(now)
		info.Holds = append(info.Holds, fencelock.HoldInfo{Token: h.token, TTL: ttl})
		info.TTL = max(info.TTL, ttl)
	}
	slices.SortFunc(info.Holds, func(a, b fencelock.HoldInfo) int { return cmp.Compare(a.Token, b.Token) })
	return info, nil
}
