package redisbackend

import (
	"context"

	"github.com/fencelock/fencelock/driver"
)

// Semaphores (fencelock.Client.Semaphore): the holds layout of holds.go,
// kind "sem". Each permit is a member of the sorted set, scored by the end
// of its lease, so expired permits are dropped by the next script that
// looks, and counting the live permits is a ZCARD. Release, renewal, TTL
// and watches are those of holds.go.

// semAcquireScript takes a permit when fewer than the caller's number are
// live: lua/sem_acquire.lua.
var semAcquireScript = newScript(luaScript("sem_acquire.lua"))

// acquirePermit is Acquire of a KindSemaphore: one permit, when fewer than
// req.Permits are live.
func (b *Backend) acquirePermit(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := b.checkAcquire(req); err != nil {
		return driver.Result{}, err
	}
	if req.Permits < 1 {
		return driver.Result{}, &driver.InvalidArgumentError{Name: "semaphore permits", Value: req.Permits, Reason: "must be at least 1"}
	}
	k := holdKeysFor(req.Namespace, req.Key, semKind)
	keys := []string{k.holds, k.info, k.fence, k.tombstone(req.Token)}
	args := []any{req.Token, ms(req.TTL), ms(b.counterExpiry), max(req.FenceFloor, 0), req.Permits}
	return b.acquireHold(ctx, semAcquireScript, keys, k, false, req.Token, args)
}
