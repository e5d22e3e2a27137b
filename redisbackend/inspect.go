package redisbackend

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LockInfo is what Redis holds about one lock, for troubleshooting: who
// holds it, for how long, its fence, and how many processes wait for it.
type LockInfo struct {
	LockKey, FenceKey, Channel string // the key layout (see keys.go)

	Held   bool
	Owner  string        // the holder: its WithOwner value, or its owner token
	Fence  int64         // the holder's fencing token
	Holds  int           // the hold count (re-entry adds one)
	Tokens []string      // owner tokens of the holds
	TTL    time.Duration // the remaining lease, measured by the server

	LastFence  int64         // the fence counter: the last token minted (0: none yet, or expired)
	CounterTTL time.Duration // the counter's expiry; -1 when it never expires
	Waiters    int64         // subscribers of the release channel: about one per waiting Client
}

// Inspect reads the state of the lock named key in namespace, in one round
// trip. It changes nothing. On Cluster, Waiters counts the subscribers of
// the node answering (PUBLISH reaches all nodes, so waiters may sit on any).
func (b *Backend) Inspect(ctx context.Context, namespace, key string) (LockInfo, error) {
	if key == "" {
		return LockInfo{}, errors.New(`redisbackend: invalid key "": must not be empty`)
	}
	if err := checkNames(namespace, key); err != nil {
		return LockInfo{}, err
	}
	k := keysFor(namespace, key)
	info := LockInfo{LockKey: k.lock, FenceKey: k.fence, Channel: k.channel}

	var (
		hash       *redis.MapStringStringCmd
		pttl       *redis.DurationCmd
		counter    *redis.StringCmd
		counterTTL *redis.DurationCmd
		subs       *redis.MapStringIntCmd
	)
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hash = p.HGetAll(ctx, k.lock)
		pttl = p.PTTL(ctx, k.lock)
		counter = p.Get(ctx, k.fence)
		counterTTL = p.PTTL(ctx, k.fence)
		subs = p.PubSubNumSub(ctx, k.channel)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return info, err
	}
	fields := hash.Val()
	if owner, ok := fields["owner"]; ok {
		info.Held = true
		info.Owner = owner
		info.Fence, _ = strconv.ParseInt(fields["fence"], 10, 64)
		info.Holds, _ = strconv.Atoi(fields["holds"])
		for f := range fields {
			if token, ok := strings.CutPrefix(f, "t:"); ok {
				info.Tokens = append(info.Tokens, token)
			}
		}
		sort.Strings(info.Tokens)
		info.TTL = max(pttl.Val(), 0)
	}
	info.LastFence, _ = strconv.ParseInt(counter.Val(), 10, 64)
	info.CounterTTL = counterTTL.Val()
	if info.CounterTTL < 0 {
		info.CounterTTL = -1
	}
	info.Waiters = subs.Val()[k.channel]
	return info, nil
}
