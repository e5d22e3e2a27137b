package memorybackend

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/fencelock/fencelock"
)

var _ fencelock.LockInspector = (*Backend)(nil)

// InspectLock implements fencelock.LockInspector: the lock, and the permits
// and read-write holds of the same name. It is a call of no Op: faults and
// Pause do not affect it, and it is not counted.
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
	if l := b.locks[lockID{namespace, key}]; l != nil {
		l.prune(now)
		info.LastFence = l.counter
		if len(l.holds) > 0 {
			info.Held, info.Owner, info.Identity, info.Fence = true, l.owner, l.identity, l.fence
			for _, h := range l.holds {
				ttl := h.end.Sub(now)
				info.Holds = append(info.Holds, fencelock.HoldInfo{Kind: fencelock.KindLock, Token: h.token, Fence: l.fence, TTL: ttl})
				info.TTL = max(info.TTL, ttl)
			}
			slices.SortFunc(info.Holds, func(a, b fencelock.HoldInfo) int { return cmp.Compare(a.Token, b.Token) })
		}
	}
	for _, rw := range []bool{false, true} {
		s := b.holds.sets[holdID{rw, namespace, key}]
		if s == nil {
			continue
		}
		s.prune(now)
		for token, h := range s.holds {
			kind := fencelock.KindSemaphore
			switch {
			case rw && token == s.writer:
				kind = fencelock.KindWrite
			case rw:
				kind = fencelock.KindRead
			}
			info.Others = append(info.Others, fencelock.HoldInfo{Kind: kind, Token: token, Fence: h.fence, TTL: h.end.Sub(now)})
		}
	}
	slices.SortFunc(info.Others, func(a, b fencelock.HoldInfo) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Fence, b.Fence))
	})
	return info, nil
}
