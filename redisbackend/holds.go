package redisbackend

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/driver"
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

// holdsReleaseScript gives up token's hold, or withdraws its place:
// lua/holds_release.lua.
var holdsReleaseScript = newScript(luaScript("holds_release.lua"))

// holdsRenewScript sets the lease of token's live hold to ttl from now:
// lua/holds_renew.lua.
var holdsRenewScript = newScript(luaScript("holds_renew.lua"))

// holdsTTLScript returns the remaining lease of token's hold:
// lua/holds_ttl.lua.
var holdsTTLScript = newScript(luaScript("holds_ttl.lua"))

// acquireHold runs an acquire script of a semaphore or read-write lock,
// with replica acknowledgement when the Backend asks for it.
func (b *Backend) acquireHold(ctx context.Context, s script, keys []string, k holdKeys, rw bool, token string, args []any) (driver.Result, error) {
	return guard(b, ctx, func(ctx context.Context) (driver.Result, error) {
		if b.ack == nil {
			vals, err := b.pipe.run(ctx, s, keys, args...).int64Slice()
			if err != nil {
				return driver.Result{}, classify(err)
			}
			return acquireResult(vals)
		}
		cmd, acks, err := b.runAcked(ctx, s, keys, args...)
		if err != nil {
			return driver.Result{}, classify(err)
		}
		vals, err := cmd.int64Slice()
		if err != nil {
			return driver.Result{}, classify(err)
		}
		if len(vals) == 0 || vals[0] != 1 || acks >= int64(b.ack.replicas) {
			return acquireResult(vals)
		}
		// Held, but a failover now could lose it: undo it, as for a lock.
		if err := b.pipe.run(ctx, holdsReleaseScript, k.releaseKeys(token), token, k.channel, 0, rwFlag(rw)).Err; err != nil {
			return driver.Result{}, b.ack.unreleased(acks, err)
		}
		return driver.Result{}, b.ack.notReplicated(acks)
	})
}

// releaseHold gives up a hold of the semaphore or read-write lock (kind).
func (b *Backend) releaseHold(ctx context.Context, kind string, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	if b.optErr != nil {
		return driver.ReleaseResult{}, b.optErr
	}
	if err := checkNames(req.Namespace, req.Key); err != nil {
		return driver.ReleaseResult{}, err
	}
	if req.Tombstone > 0 {
		if err := checkLease("tombstone", req.Tombstone); err != nil {
			return driver.ReleaseResult{}, err
		}
	}
	k := holdKeysFor(req.Namespace, req.Key, kind)
	return guard(b, ctx, func(ctx context.Context) (driver.ReleaseResult, error) {
		n, err := b.pipe.run(ctx, holdsReleaseScript, k.releaseKeys(req.Token),
			req.Token, k.channel, ms(max(req.Tombstone, 0)), rwFlag(kind == rwKind)).int64()
		if err != nil {
			return driver.ReleaseResult{}, classify(err)
		}
		return driver.ReleaseResult{Held: n == 0}, nil
	})
}

// holdTTL returns the remaining lease of a hold of a semaphore or
// read-write lock (kind).
func (b *Backend) holdTTL(ctx context.Context, kind string, ref driver.Ref) (time.Duration, error) {
	if b.optErr != nil {
		return 0, b.optErr
	}
	if err := checkNames(ref.Namespace, ref.Key); err != nil {
		return 0, err
	}
	k := holdKeysFor(ref.Namespace, ref.Key, kind)
	left, err := guard(b, ctx, func(ctx context.Context) (int64, error) {
		return b.pipe.run(ctx, holdsTTLScript, []string{k.holds}, ref.Token).int64()
	})
	if err != nil {
		return 0, classify(err)
	}
	if left == -2 {
		return 0, driver.ErrNotHeld
	}
	return time.Duration(max(left, 0)) * time.Millisecond, nil
}

// checkAcquire validates what every acquire of a hold needs.
func (b *Backend) checkAcquire(req driver.Request) error {
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

// holdKind is the key prefix part of the holds of kind k: a semaphore's
// permits, or a read-write lock's read and write holds (one layout).
func holdKind(k driver.Kind) string {
	if k == driver.KindSemaphore {
		return semKind
	}
	return rwKind
}

func rwFlag(rw bool) int {
	if rw {
		return 1
	}
	return 0
}
