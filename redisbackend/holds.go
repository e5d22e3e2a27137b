package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
)

// Semaphores (semaphore.go) and read-write locks (rwlock.go) keep their
// holds alike: a sorted set of the holders' tokens scored by the server
// time (ms) at which each lease ends, so that the lapsed ones are one
// ZREMRANGEBYSCORE away, and a hash beside it with each hold's fence. The
// release, renewal and TTL scripts below serve both. For the semaphore or
// read-write lock named KEY in namespace NS, with KIND "sem" or "rw":
//
//	NS:{KEY}:KIND                 sorted set: member = a hold's owner token,
//	                              score = when its lease ends (server ms)
//	NS:{KEY}:KIND:info            hash: f:TOKEN = the hold's fence;
//	                              writer = the writer's token (rw, while a
//	                              writer holds it); waited = an acquire was
//	                              refused since the last wake-up
//	NS:{KEY}:KIND:writers         sorted set (rw): waiting writers' intents,
//	                              score = when each lapses (server ms)
//	NS:{KEY}:KIND:readers         sorted set (rw): waiting readers' places,
//	                              score = when each lapses (server ms)
//	NS:{KEY}:KIND:admitted        sorted set (rw): readers let in ahead of
//	                              writers by the last writer's release
//	NS:{KEY}:KIND:fence           string: the last fence minted
//	NS:{KEY}:KIND:tombstone:TOK   string, expiring: acquires by TOK refused
//	NS:{KEY}:KIND:released        pub/sub channel: "released"
//
// The hold keys expire with the latest lease (or place) they keep; the
// fence counter as the lock's does (WithFenceCounterExpiry). The hash tag
// is the lock's, so a semaphore or read-write lock is one Cluster slot.

// holdKeys are the names one semaphore or read-write lock uses.
type holdKeys struct {
	prefix, holds, info, writers, readers, admitted, fence, channel string
}

func holdKeysFor(namespace, key, kind string) holdKeys {
	p := keysFor(namespace, key).base + ":" + kind
	return holdKeys{
		prefix:   p,
		holds:    p,
		info:     p + ":info",
		writers:  p + ":writers",
		readers:  p + ":readers",
		admitted: p + ":admitted",
		fence:    p + ":fence",
		channel:  p + ":released",
	}
}

func (k holdKeys) tombstone(token string) string { return k.prefix + ":tombstone:" + token }

// releaseKeys are the KEYS of holdsReleaseScript for token.
func (k holdKeys) releaseKeys(token string) []string {
	return []string{k.holds, k.info, k.tombstone(token), k.writers, k.readers, k.admitted}
}

// renewKeys are the KEYS of holdsRenewScript.
func (k holdKeys) renewKeys() []string {
	return []string{k.holds, k.info, k.writers, k.readers, k.admitted}
}

// holdFunctions are the Lua helpers of the hold scripts (with prelude's
// now_us and mint_fence).
const holdFunctions = `
-- prune_holds drops the holds whose lease ended by now (ms), with their
-- fences, and the writer mark of a writer whose hold is gone. The holds
-- set may have expired as a whole (it expires with its latest lease) while
-- places keep info alive: then no hold is left to find lapsed, and the
-- marks of info are checked against the set all the same.
local function prune_holds(holds, info, now)
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', holds, '-inf', now)
    for i = 1, #gone do
      redis.call('HDEL', info, 'f:' .. gone[i])
    end
  end
  if redis.call('ZCARD', holds) == 0 then
    -- No live hold: no fence or writer mark of info is anyone's.
    local fields = redis.call('HKEYS', info)
    for i = 1, #fields do
      if fields[i] == 'writer' or string.sub(fields[i], 1, 2) == 'f:' then
        redis.call('HDEL', info, fields[i])
      end
    end
    return
  end
  local writer = redis.call('HGET', info, 'writer')
  if writer and not redis.call('ZSCORE', holds, writer) then
    redis.call('HDEL', info, 'writer')
  end
end

-- prune_places drops the places (of a read-write lock) that lapsed by now.
local function prune_places(writers, readers, admitted, now)
  redis.call('ZREMRANGEBYSCORE', writers, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', admitted, '-inf', now)
end

-- last_score is the highest score of a sorted set, or 0 when it is empty.
local function last_score(set)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if #last == 0 then return 0 end
  return tonumber(last[2])
end

-- first_score is the lowest score of a sorted set, or nil when it is empty.
local function first_score(set)
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if #first == 0 then return nil end
  return tonumber(first[2])
end

-- keep_alive makes each sorted set of sets (the holds and the places)
-- expire with its latest entry, and info with the latest of all; with no
-- entry left, info is deleted.
local function keep_alive(info, sets, now)
  local latest = 0
  for i = 1, #sets do
    local last = last_score(sets[i])
    if last > now then
      redis.call('PEXPIRE', sets[i], last - now)
      if last > latest then latest = last end
    end
  end
  if latest <= now then
    redis.call('DEL', info)
    return
  end
  redis.call('PEXPIRE', info, latest - now)
end

-- grant gives token a new hold with a new fence, and returns the acquire
-- scripts' reply.
local function grant(holds, info, sets, counter, token, nowUs, ttl, floor, counterTTL)
  local fence = mint_fence(counter, nowUs, floor, counterTTL)
  local now = math.floor(nowUs / 1000)
  redis.call('ZADD', holds, now + ttl, token)
  redis.call('HSET', info, 'f:' .. token, string.format('%d', fence))
  keep_alive(info, sets, now)
  return {1, fence, 1}
end

-- retry_hold restarts the lease of token's live hold (an acquire whose
-- reply was lost, sent again) and returns the acquire reply; nil when token
-- holds nothing.
local function retry_hold(holds, info, sets, token, now, ttl)
  if not redis.call('ZSCORE', holds, token) then return nil end
  redis.call('ZADD', holds, now + ttl, token)
  keep_alive(info, sets, now)
  return {1, tonumber(redis.call('HGET', info, 'f:' .. token)), 1}
end

-- refuse marks the keys as waited for (the next release that may let a
-- waiter in publishes) and returns the acquire reply of a refusal, with
-- wait ms until something may change (-1: unknown).
local function refuse(info, sets, now, wait)
  redis.call('HSET', info, 'waited', '1')
  keep_alive(info, sets, now)
  return {0, 0, 0, wait}
end
`

// holdsReleaseScript gives up token's hold, or withdraws its place. It
// publishes "released", if an acquire was refused since the last message,
// when the release may let a waiter in: any permit of a semaphore; the
// writer, the last reader, the last intent or the last admitted reader of
// a read-write lock. The writer's release admits the readers waiting.
//
//	KEYS: holds, info, tombstone, writers, readers, admitted (the last three
//	      unused by semaphores)
//	ARGV: token, channel, tombstone (ms, 0: none), rw (1 for a read-write lock)
//	returns 0 when the token's hold was live and is released, -1 when not.
var holdsReleaseScript = newScript(prelude + holdFunctions + `
local holds, info, tombstone = KEYS[1], KEYS[2], KEYS[3]
local writers, readers, admitted = KEYS[4], KEYS[5], KEYS[6]
local token, channel, tombstoneMs, rw = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
if tombstoneMs > 0 then
  redis.call('SET', tombstone, '1', 'PX', tombstoneMs)
end
local now = math.floor(now_us() / 1000)
local ends = redis.call('ZSCORE', holds, token)
local wasWriter = false
if ends then
  redis.call('ZREM', holds, token)
  redis.call('HDEL', info, 'f:' .. token)
  if redis.call('HGET', info, 'writer') == token then
    redis.call('HDEL', info, 'writer')
    wasWriter = true
  end
end
local wake = ends ~= false
if rw then
  local intent = redis.call('ZREM', writers, token) == 1
  redis.call('ZREM', readers, token)
  local wasAdmitted = redis.call('ZREM', admitted, token) == 1
  prune_holds(holds, info, now)
  prune_places(writers, readers, admitted, now)
  if wasWriter then
    -- The readers' turn: those waiting go in before the next writer.
    redis.call('ZUNIONSTORE', admitted, 2, admitted, readers, 'AGGREGATE', 'MAX')
    redis.call('DEL', readers)
  end
  local free = redis.call('ZCARD', holds) == 0 and redis.call('ZCARD', admitted) == 0
  wake = wasWriter or (ends and free) or (wasAdmitted and free) or
    (intent and redis.call('ZCARD', writers) == 0)
else
  prune_holds(holds, info, now)
end
if wake and redis.call('HDEL', info, 'waited') == 1 then
  redis.call('PUBLISH', channel, 'released')
end
keep_alive(info, {holds, writers, readers, admitted}, now)
if not ends or tonumber(ends) <= now then
  return -1
end
return 0
`)

// holdsRenewScript sets the lease of token's live hold to ttl from now; it
// never re-creates a lapsed hold.
//
//	KEYS: holds, info, writers, readers, admitted    ARGV: token, ttl (ms)
//	returns 1 when renewed, 0 when the token has no live hold.
var holdsRenewScript = newScript(prelude + holdFunctions + `
local holds, info = KEYS[1], KEYS[2]
local token, ttl = ARGV[1], tonumber(ARGV[2])
local now = math.floor(now_us() / 1000)
local ends = redis.call('ZSCORE', holds, token)
if not ends or tonumber(ends) <= now then
  return 0
end
redis.call('ZADD', holds, now + ttl, token)
keep_alive(info, {holds, KEYS[3], KEYS[4], KEYS[5]}, now)
return 1
`)

// holdsTTLScript returns the remaining lease of token's hold in ms, or -2
// when it has no live hold.
//
//	KEYS: holds    ARGV: token
var holdsTTLScript = newScript(prelude + `
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends then
  return -2
end
local left = tonumber(ends) - math.floor(now_us() / 1000)
if left <= 0 then
  return -2
end
return left
`)

// acquireHold runs an acquire script of a semaphore or read-write lock,
// with replica acknowledgement when the Backend asks for it.
func (b *Backend) acquireHold(ctx context.Context, s script, keys []string, k holdKeys, rw bool, token string, args []any) (fencelock.AcquireResult, error) {
	return guard(b, ctx, func(ctx context.Context) (fencelock.AcquireResult, error) {
		if b.ack == nil {
			vals, err := b.pipe.run(ctx, s, keys, args...).Int64Slice()
			if err != nil {
				return fencelock.AcquireResult{}, classify(err)
			}
			return acquireResult(vals)
		}
		cmd, acks, err := b.runAcked(ctx, s, keys, args...)
		if err != nil {
			return fencelock.AcquireResult{}, classify(err)
		}
		vals, err := cmd.Int64Slice()
		if err != nil {
			return fencelock.AcquireResult{}, classify(err)
		}
		if len(vals) == 0 || vals[0] != 1 || acks >= int64(b.ack.replicas) {
			return acquireResult(vals)
		}
		// Held, but a failover now could lose it: undo it, as for a lock.
		if err := b.pipe.run(ctx, holdsReleaseScript, k.releaseKeys(token), token, k.channel, 0, rwFlag(rw)).Err(); err != nil {
			return fencelock.AcquireResult{}, fmt.Errorf("%w (and its release failed: %w)", b.ack.notReplicated(acks), err)
		}
		return fencelock.AcquireResult{}, b.ack.notReplicated(acks)
	})
}

// releaseHold gives up a hold of the semaphore or read-write lock (kind).
func (b *Backend) releaseHold(ctx context.Context, kind string, req fencelock.ReleaseRequest) (fencelock.ReleaseResult, error) {
	if b.optErr != nil {
		return fencelock.ReleaseResult{}, b.optErr
	}
	if err := checkNames(req.Namespace, req.Key); err != nil {
		return fencelock.ReleaseResult{}, err
	}
	if req.Tombstone > 0 {
		if err := checkLease("tombstone", req.Tombstone); err != nil {
			return fencelock.ReleaseResult{}, err
		}
	}
	k := holdKeysFor(req.Namespace, req.Key, kind)
	return guard(b, ctx, func(ctx context.Context) (fencelock.ReleaseResult, error) {
		n, err := b.pipe.run(ctx, holdsReleaseScript, k.releaseKeys(req.Token),
			req.Token, k.channel, ms(max(req.Tombstone, 0)), rwFlag(kind == rwKind)).Int64()
		if err != nil {
			return fencelock.ReleaseResult{}, classify(err)
		}
		return fencelock.ReleaseResult{Held: n == 0}, nil
	})
}

// renewHolds renews a batch of holds of semaphores or read-write locks
// (kind) in one pipelined round trip (one per node on Cluster).
func (b *Backend) renewHolds(ctx context.Context, kind string, reqs []fencelock.RenewRequest) ([]fencelock.RenewResult, error) {
	if b.optErr != nil {
		return nil, b.optErr
	}
	calls := make([]call, len(reqs))
	for i, r := range reqs {
		if err := checkNames(r.Namespace, r.Key); err != nil {
			return nil, err
		}
		if err := checkLease("ttl", r.TTL); err != nil {
			return nil, err
		}
		k := holdKeysFor(r.Namespace, r.Key, kind)
		calls[i] = call{keys: k.renewKeys(), args: []any{r.Token, ms(r.TTL)}}
	}
	return guard(b, ctx, func(ctx context.Context) ([]fencelock.RenewResult, error) {
		if b.ack != nil {
			return b.renewAckedWith(ctx, holdsRenewScript, calls), nil
		}
		results := make([]fencelock.RenewResult, len(reqs))
		for i, cmd := range b.scripts.runBatch(ctx, b.rdb, holdsRenewScript, calls) {
			n, err := cmd.Int64()
			results[i] = fencelock.RenewResult{Held: err == nil && n == 1, Err: classify(err)}
			b.noteFailure(err)
		}
		return results, nil
	})
}

// holdTTL returns the remaining lease of a hold of a semaphore or
// read-write lock (kind).
func (b *Backend) holdTTL(ctx context.Context, kind string, ref fencelock.LockRef) (time.Duration, error) {
	if b.optErr != nil {
		return 0, b.optErr
	}
	if err := checkNames(ref.Namespace, ref.Key); err != nil {
		return 0, err
	}
	k := holdKeysFor(ref.Namespace, ref.Key, kind)
	left, err := guard(b, ctx, func(ctx context.Context) (int64, error) {
		return b.pipe.run(ctx, holdsTTLScript, []string{k.holds}, ref.Token).Int64()
	})
	if err != nil {
		return 0, classify(err)
	}
	if left == -2 {
		return 0, fencelock.ErrNotHeld
	}
	return time.Duration(max(left, 0)) * time.Millisecond, nil
}

// watchHolds registers for the release messages of a semaphore or
// read-write lock (kind).
func (b *Backend) watchHolds(ctx context.Context, kind, namespace, key string) (*fencelock.Watch, error) {
	if b.notifier == nil {
		return nil, errNotificationsOff
	}
	return b.notifier.watch(ctx, holdKeysFor(namespace, key, kind).channel, false)
}

// checkAcquire validates what every acquire of a hold needs.
func (b *Backend) checkAcquire(req fencelock.AcquireRequest) error {
	if b.optErr != nil {
		return b.optErr
	}
	if err := checkNames(req.Namespace, req.Key); err != nil {
		return err
	}
	return checkLease("ttl", req.TTL)
}

// The kinds of holds, the last part of their key prefix.
const (
	semKind = "sem"
	rwKind  = "rw"
)

func rwFlag(rw bool) int {
	if rw {
		return 1
	}
	return 0
}
