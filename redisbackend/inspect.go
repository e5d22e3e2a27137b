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

	Held       bool
	Owner      string                   // the holder: its WithOwner value, or its owner token
	Identity   string                   // the holder's fencelock.WithIdentity (field id), "" when none
	Fence      int64                    // the holder's fencing token
	Holds      int                      // the live holds (re-entry adds one; a lapsed hold is not counted)
	Tokens     []string                 // owner tokens of the live holds, sorted
	HoldLeases map[string]time.Duration // each live hold's remaining lease, by token
	TTL        time.Duration            // the lock's remaining lease (its longest hold's), measured by the server

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
		now        *redis.TimeCmd
	)
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		hash = p.HGetAll(ctx, k.lock)
		pttl = p.PTTL(ctx, k.lock)
		counter = p.Get(ctx, k.fence)
		counterTTL = p.PTTL(ctx, k.fence)
		subs = p.PubSubNumSub(ctx, k.channel)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return info, misconfigured(err)
	}
	fields := hash.Val()
	serverNow := now.Val().UnixMilli()
	for f, v := range fields {
		token, ok := strings.CutPrefix(f, "t:")
		if !ok {
			continue
		}
		// The field holds the server time (ms) at which the hold's lease
		// ends; a hold past it is gone, although no script has dropped it yet.
		ends, _ := strconv.ParseInt(v, 10, 64)
		if left := ends - serverNow; left > 0 {
			if info.HoldLeases == nil {
				info.HoldLeases = make(map[string]time.Duration)
			}
			info.HoldLeases[token] = time.Duration(left) * time.Millisecond
			info.Tokens = append(info.Tokens, token)
		}
	}
	if owner, ok := fields["owner"]; ok && len(info.Tokens) > 0 {
		sort.Strings(info.Tokens)
		info.Held = true
		info.Owner = owner
		info.Identity = fields["id"]
		info.Fence, _ = strconv.ParseInt(fields["fence"], 10, 64)
		info.Holds = len(info.Tokens)
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
