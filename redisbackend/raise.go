package redisbackend

import (
	"context"
	"fmt"
)

// raiseFenceScript makes the lock's fence counter at least fence, and the
// fence of token's hold if it holds the lock: lua/raise_fence.lua. A
// quorum backend (the redlock package) uses it after an acquisition on
// several masters.
var raiseFenceScript = newScript(luaScript("raise_fence.lua"))

// RaiseFence makes the fence counter of the lock named key at least fence,
// so that the next acquisition on this server mints a larger fencing token,
// and records fence as the fence of the hold of token if the lock has it
// (re-entry then returns it). It reports whether the lock holds token. It
// is for backends that combine several servers (the redlock package), whose
// lock's fence is the largest minted by any of them.
func (b *Backend) RaiseFence(ctx context.Context, namespace, key, token string, fence int64) (bool, error) {
	if b.optErr != nil {
		return false, b.optErr
	}
	if err := checkNames(namespace, key); err != nil {
		return false, err
	}
	if fence <= 0 {
		return false, fmt.Errorf("redisbackend: RaiseFence: fence %d is not positive", fence)
	}
	k := keysFor(namespace, key)
	held, err := guard(b, ctx, func(ctx context.Context) (int64, error) {
		return b.pipe.run(ctx, raiseFenceScript, []string{k.lock, k.fence}, fence, token, ms(b.counterExpiry)).int64()
	})
	if err != nil {
		return false, classify(err)
	}
	return held == 1, nil
}
