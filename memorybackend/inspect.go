package memorybackend

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// InspectLock implements driver.Inspector: the lock, and the permits
// and read-write holds of the same name. It is a call of no Op: faults and
// Pause do not affect it, and it is not counted.
func (b *Backend) InspectLock(ctx context.Context, namespace, key string) (driver.LockInfo, error) {
	if err := checkKey(key); err != nil {
		return driver.LockInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.LockInfo{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.LockInfo{}, ErrClosed
	}
	info := driver.LockInfo{Key: key}
	if l := b.locks[lockID{namespace, key}]; l != nil {
		l.prune(now)
		info.LastFence = l.counter
		if len(l.holds) > 0 {
			info.Held, info.Owner, info.Identity, info.Fence = true, l.owner, l.identity, l.fence
			for _, h := range l.holds {
				ttl := h.end.Sub(now)
				info.Holds = append(info.Holds, driver.HoldInfo{Kind: driver.KindLock, Token: h.token, Fence: l.fence, TTL: ttl})
				info.TTL = max(info.TTL, ttl)
			}
			slices.SortFunc(info.Holds, func(a, b driver.HoldInfo) int { return cmp.Compare(a.Token, b.Token) })
		}
	}
	for _, rw := range []bool{false, true} {
		s := b.holds.sets[holdID{rw, namespace, key}]
		if s == nil {
			continue
		}
		s.prune(now)
		for token, h := range s.holds {
			kind := driver.KindSemaphore
			switch {
			case rw && token == s.writer:
				kind = driver.KindWrite
			case rw:
				kind = driver.KindRead
			}
			info.Others = append(info.Others, driver.HoldInfo{Kind: kind, Token: token, Fence: h.fence, TTL: h.end.Sub(now)})
		}
	}
	slices.SortFunc(info.Others, func(a, b driver.HoldInfo) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Fence, b.Fence))
	})
	return info, nil
}
