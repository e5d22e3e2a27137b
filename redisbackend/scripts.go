package redisbackend

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Every script gets the keys it touches in KEYS (all in one hash slot) and
// takes one round trip. Field names are described in keys.go.

// acquireScript takes a free lock, re-enters a lock held by the same owner,
// or reports the holder's remaining lease.
//
//	KEYS: lock, fence counter    ARGV: owner, token, ttl (ms), counter expiry (ms, 0: none)
//	returns {1, fence, holds} when held, {0, 0, 0, holder pttl} when not.
//
// The fencing token is minted in the same step as the acquire: one more than
// the last one, but at least the server's clock in microseconds, so tokens
// keep growing after a restart that lost the counter (no persistence), as
// long as the server's clock does not step back.
var acquireScript = newScript(`
local lock, counter = KEYS[1], KEYS[2]
local owner, hold, ttl, counterTTL = ARGV[1], 't:' .. ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local holder = redis.call('HGET', lock, 'owner')
if not holder then
  local now = redis.call('TIME')
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local fence = redis.call('INCR', counter)
  if fence < floor then
    fence = floor
    redis.call('SET', counter, string.format('%d', fence))
  end
  if counterTTL > 0 then
    redis.call('PEXPIRE', counter, counterTTL)
  end
  redis.call('HSET', lock, 'owner', owner, 'fence', string.format('%d', fence), 'holds', '1', hold, '1')
  redis.call('PEXPIRE', lock, ttl)
  return {1, fence, 1}
end

if holder == owner then
  local fence = tonumber(redis.call('HGET', lock, 'fence'))
  local holds
  if redis.call('HEXISTS', lock, hold) == 1 then
    -- A retry of an acquire that succeeded but whose reply was lost.
    holds = tonumber(redis.call('HGET', lock, 'holds'))
  else
    holds = redis.call('HINCRBY', lock, 'holds', 1)
    redis.call('HSET', lock, hold, '1')
  end
  -- Never shorten the lease of the other holds.
  if redis.call('PTTL', lock) < ttl then
    redis.call('PEXPIRE', lock, ttl)
  end
  return {1, fence, holds}
end

return {0, 0, 0, redis.call('PTTL', lock)}
`)

// releaseScript drops one hold, if the lock has it; the last hold deletes
// the lock and wakes waiters.
//
//	KEYS: lock    ARGV: token, channel
//	returns the holds left, or -1 when the lock did not have this hold.
var releaseScript = newScript(`
local lock, hold = KEYS[1], 't:' .. ARGV[1]
if redis.call('HDEL', lock, hold) == 0 then
  return -1
end
local holds = redis.call('HINCRBY', lock, 'holds', -1)
if holds <= 0 then
  redis.call('DEL', lock)
  redis.call('PUBLISH', ARGV[2], 'released')
  return 0
end
return holds
`)

// renewScript sets the lease of a lock that still has the hold; it never
// re-creates a lapsed lock. With several holds it only lengthens the lease.
//
//	KEYS: lock    ARGV: token, ttl (ms)
//	returns 1 when renewed, 0 when the lock does not have this hold.
var renewScript = newScript(`
local lock, hold, ttl = KEYS[1], 't:' .. ARGV[1], tonumber(ARGV[2])
if redis.call('HEXISTS', lock, hold) == 0 then
  return 0
end
if tonumber(redis.call('HGET', lock, 'holds')) > 1 and redis.call('PTTL', lock) >= ttl then
  return 1
end
redis.call('PEXPIRE', lock, ttl)
return 1
`)

// ttlScript returns the remaining lease in ms, or -2 when the lock does not
// have this hold.
//
//	KEYS: lock    ARGV: token
var ttlScript = newScript(`
if redis.call('HEXISTS', KEYS[1], 't:' .. ARGV[1]) == 0 then
  return -2
end
return redis.call('PTTL', KEYS[1])
`)

// script is a Lua script run with EVALSHA, falling back to EVAL when the
// server's script cache has lost it (restart, failover, SCRIPT FLUSH).
type script struct {
	*redis.Script
	id int // index into scriptCache
}

var scriptCount int

func newScript(src string) script {
	scriptCount++
	return script{redis.NewScript(src), scriptCount - 1}
}

// scriptCache remembers, per Backend, which scripts it has sent with EVAL, so
// that the first run of each is one round trip (EVAL loads it) rather than a
// NOSCRIPT reply followed by EVAL.
type scriptCache struct {
	sent [8]atomic.Bool
}

// run runs s in one round trip (two after the server's cache was lost).
func (c *scriptCache) run(ctx context.Context, rdb redis.Scripter, s script, keys []string, args ...any) *redis.Cmd {
	if !c.sent[s.id].Load() {
		cmd := s.Eval(ctx, rdb, keys, args...)
		if cmd.Err() == nil {
			c.sent[s.id].Store(true)
		}
		return cmd
	}
	cmd := s.EvalSha(ctx, rdb, keys, args...)
	if isNoScript(cmd.Err()) {
		cmd = s.Eval(ctx, rdb, keys, args...)
	}
	return cmd
}

// queue adds s to pipe: EVALSHA, or EVAL while this Backend has not sent
// the script yet. The caller retries NOSCRIPT replies with EVAL.
func (c *scriptCache) queue(ctx context.Context, pipe redis.Pipeliner, s script, keys []string, args ...any) *redis.Cmd {
	if !c.sent[s.id].Load() {
		c.sent[s.id].Store(true) // optimistic: a failed EVAL leaves NOSCRIPT to the fallback
		return s.Eval(ctx, pipe, keys, args...)
	}
	return s.EvalSha(ctx, pipe, keys, args...)
}

// call is one script invocation in a pipelined batch.
type call struct {
	keys []string
	args []any
}

// runBatch runs the script once per call in one pipelined round trip (per
// Cluster node), then once more with EVAL for the calls that met NOSCRIPT.
// It returns one command per call, each with its own result or error.
func (c *scriptCache) runBatch(ctx context.Context, rdb redis.UniversalClient, s script, calls []call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i, call := range calls {
		cmds[i] = c.queue(ctx, pipe, s, call.keys, call.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are in the commands

	var missing []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return cmds
	}
	pipe = rdb.Pipeline()
	for _, i := range missing {
		cmds[i] = s.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

func isNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}
