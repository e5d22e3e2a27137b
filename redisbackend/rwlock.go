package redisbackend

import (
	"context"

	"github.com/fencelock/fencelock/driver"
)

// Read-write locks (fencelock.Client.RWLock): the holds layout of holds.go,
// kind "rw". Readers and the writer are members of one sorted set, scored
// by the end of their leases; the info hash names the writer. Three more
// sorted sets keep places, scored by when each lapses: the intents of
// waiting writers, the places of waiting readers, and the readers the last
// writer's release let in ahead of the next writer. Release, renewal, TTL
// and watches are those of holds.go.

// rwAcquireScript takes a read or write hold, or registers the caller's
// place: lua/rw_acquire.lua.
var rwAcquireScript = newScript(luaScript("rw_acquire.lua"))

// acquireRW is Acquire of a KindRead or KindWrite, keeping the caller's
// place for req.Place when refused.
func (b *Backend) acquireRW(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := b.checkAcquire(req); err != nil {
		return driver.Result{}, err
	}
	if req.Place != 0 {
		if err := checkLease("place", req.Place); err != nil {
			return driver.Result{}, err
		}
	}
	k := holdKeysFor(req.Namespace, req.Key, rwKind)
	keys := []string{k.holds, k.info, k.fence, k.tombstone(req.Token), k.writers, k.readers, k.admitted}
	args := []any{req.Token, ms(req.TTL), ms(b.counterExpiry), max(req.FenceFloor, 0), rwFlag(req.Kind == driver.KindWrite), ms(req.Place)}
	return b.acquireHold(ctx, rwAcquireScript, keys, k, true, req.Token, args)
}
