package redisbackend

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/redis/go-redis/v9"
)

// Inspection is what Redis holds under one name, for troubleshooting: the
// holds of every kind as Client.Inspect reports them (the plain lock's,
// and the permits and read-write holds of the same name in Others), and
// the Redis particulars beside them: the keys, the fence counter's expiry,
// and how many processes wait.
type Inspection struct {
	driver.LockInfo

	LockKey, FenceKey, Channel string        // the plain lock's key layout (see keys.go)
	CounterTTL                 time.Duration // the lock's fence counter's expiry; -1 when it never expires
	Waiters                    int64         // subscribers of the lock's release channel: about one per waiting Client

	Semaphore, RW HoldsInspection // the semaphore and the read-write lock of the same name
}

// HoldsInspection is what Redis holds about the semaphore or the
// read-write lock of a name besides its holds (which are in
// LockInfo.Others).
type HoldsInspection struct {
	Key, FenceKey, Channel string // the holds (NS:{KEY}:sem or NS:{KEY}:rw), the fence counter, the release channel
	LastFence              int64  // the last fence minted (0: none yet, or expired)
	Waiters                int64  // subscribers of Channel: about one per waiting Client
	// WaitingWriters and WaitingReaders are the read-write lock's live
	// places: the intents of waiting writers, and the places of readers
	// waiting for a writer to leave.
	WaitingWriters, WaitingReaders int
}

// Inspect reads what Redis holds under the name key in namespace, every
// kind of hold, in one round trip (the keys of a name share its hash tag,
// so on Cluster they are on one node). It changes nothing. On Cluster,
// the waiters are counted on the node answering (PUBLISH reaches all
// nodes, so waiters may sit on any).
func (b *Backend) Inspect(ctx context.Context, namespace, key string) (Inspection, error) {
	if key == "" {
		return Inspection{}, &driver.InvalidArgumentError{Name: "key", Value: key, Reason: "must not be empty"}
	}
	if err := checkNames(namespace, key); err != nil {
		return Inspection{}, err
	}
	k := keysFor(namespace, key)
	sem, rw := holdKeysFor(namespace, key, semKind), holdKeysFor(namespace, key, rwKind)
	info := Inspection{
		LockInfo: driver.LockInfo{Key: key},
		LockKey:  k.lock, FenceKey: k.fence, Channel: k.channel,
		Semaphore: HoldsInspection{Key: sem.holds, FenceKey: sem.fence, Channel: sem.channel},
		RW:        HoldsInspection{Key: rw.holds, FenceKey: rw.fence, Channel: rw.channel},
	}
	type holdsCmds struct {
		holds, writers, readers *redis.ZSliceCmd
		info                    *redis.MapStringStringCmd
		counter                 *redis.StringCmd
	}
	var (
		now              *redis.TimeCmd
		hash             *redis.MapStringStringCmd
		pttl, counterTTL *redis.DurationCmd
		counter          *redis.StringCmd
		subs             *redis.MapStringIntCmd
		semCmds, rwCmds  holdsCmds
		readHolds        = func(p redis.Pipeliner, k holdKeys, places bool) holdsCmds {
			c := holdsCmds{
				holds:   p.ZRangeWithScores(ctx, k.holds, 0, -1),
				info:    p.HGetAll(ctx, k.info),
				counter: p.Get(ctx, k.fence),
			}
			if places {
				c.writers = p.ZRangeWithScores(ctx, k.writers, 0, -1)
				c.readers = p.ZRangeWithScores(ctx, k.readers, 0, -1)
			}
			return c
		}
	)
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		hash = p.HGetAll(ctx, k.lock)
		pttl = p.PTTL(ctx, k.lock)
		counter = p.Get(ctx, k.fence)
		counterTTL = p.PTTL(ctx, k.fence)
		semCmds = readHolds(p, sem, false)
		rwCmds = readHolds(p, rw, true)
		subs = p.PubSubNumSub(ctx, k.channel, sem.channel, rw.channel)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return info, misconfigured(err)
	}
	serverNow := now.Val().UnixMilli()

	// The plain lock: a field t:TOKEN per hold, holding the server time
	// (ms) at which its lease ends; a hold past it is gone, although no
	// script has dropped it yet.
	fields := hash.Val()
	var holds []driver.HoldInfo
	for f, v := range fields {
		token, ok := strings.CutPrefix(f, "t:")
		if !ok {
			continue
		}
		ends, _ := strconv.ParseInt(v, 10, 64)
		if left := ends - serverNow; left > 0 {
			holds = append(holds, driver.HoldInfo{Kind: driver.KindLock, Token: token, TTL: time.Duration(left) * time.Millisecond})
		}
	}
	if owner, ok := fields["owner"]; ok && len(holds) > 0 {
		info.Held = true
		info.Owner = owner
		info.Identity = fields["id"]
		info.Fence, _ = strconv.ParseInt(fields["fence"], 10, 64)
		for i := range holds {
			holds[i].Fence = info.Fence
		}
		slices.SortFunc(holds, func(a, b driver.HoldInfo) int { return strings.Compare(a.Token, b.Token) })
		info.Holds = holds
		info.TTL = max(pttl.Val(), 0)
	}
	info.LastFence, _ = strconv.ParseInt(counter.Val(), 10, 64)
	info.CounterTTL = counterTTL.Val()
	if info.CounterTTL < 0 {
		info.CounterTTL = -1
	}

	// The semaphore's and the read-write lock's holds: members of a sorted
	// set scored by the server time (ms) at which each lease ends, with
	// their fences (f:TOKEN) and the writer's token in the info hash.
	others := func(c holdsCmds, kind driver.Kind, into *HoldsInspection) {
		infoFields := c.info.Val()
		for _, z := range c.holds.Val() {
			left := int64(z.Score) - serverNow
			token, _ := z.Member.(string)
			if left <= 0 {
				continue
			}
			h := driver.HoldInfo{Kind: kind, Token: token, TTL: time.Duration(left) * time.Millisecond}
			h.Fence, _ = strconv.ParseInt(infoFields["f:"+token], 10, 64)
			if kind == driver.KindRead && infoFields["writer"] == token {
				h.Kind = driver.KindWrite
			}
			info.Others = append(info.Others, h)
		}
		into.LastFence, _ = strconv.ParseInt(c.counter.Val(), 10, 64)
		live := func(places *redis.ZSliceCmd) int {
			n := 0
			if places != nil {
				for _, z := range places.Val() {
					if int64(z.Score) > serverNow {
						n++
					}
				}
			}
			return n
		}
		into.WaitingWriters, into.WaitingReaders = live(c.writers), live(c.readers)
	}
	others(semCmds, driver.KindSemaphore, &info.Semaphore)
	others(rwCmds, driver.KindRead, &info.RW)
	slices.SortFunc(info.Others, func(a, b driver.HoldInfo) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Fence, b.Fence))
	})

	n := subs.Val()
	info.Waiters, info.Semaphore.Waiters, info.RW.Waiters = n[k.channel], n[sem.channel], n[rw.channel]
	return info, nil
}
