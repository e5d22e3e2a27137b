package redisbackend

import (
	"context"
	"fmt"
)

// raiseFenceScript makes the lock's fence counter at least fence, and, if
// token holds the lock, makes fence its fence. A quorum backend (the redlock
// package) uses it after an acquisition on several masters: the lock's fence
// is the largest any of them minted, and every master of the majority must
// mint a larger one next time.
//
//	KEYS: lock, fence counter    ARGV: fence, token, counter expiry (ms, 0: none)
//	returns 1 when token holds the lock, 0 when not.
var raiseFenceScript = newScript(`
local lock, counter = KEYS[1], KEYS[2]
local fence, hold, counterTTL = tonumber(ARGV[1]), 't:' .. ARGV[2], tonumber(ARGV[3])
if tonumber(redis.call('GET', counter) or 0) < fence then
  redis.call('SET', counter, string.format('%d', fence))
end
if counterTTL > 0 then
  redis.call('PEXPIRE', counter, counterTTL)
end
if redis.call('HEXISTS', lock, hold) == 0 then
  return 0
end
redis.call('HSET', lock, 'fence', string.format('%d', fence))
return 1
`)

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
		return b.pipe.run(ctx, raiseFenceScript, []string{k.lock, k.fence}, fence, token, ms(b.counterExpiry)).Int64()
	})
	if err != nil {
		return false, classify(err)
	}
	return held == 1, nil
}
