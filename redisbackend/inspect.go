package redisbackend

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/driver"
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
	// One pipeline: TIME, then the plain lock's hash, PTTL, counter and
	// counter's PTTL, then per holds key (semaphore, read-write lock) its
	// sorted set, info hash, counter (and the read-write lock's places in
	// line), then the channels' subscriber counts.
	cmd := func(args ...any) Command { return Command{Args: args, FirstKey: 1, Keys: 1} }
	cmds := []Command{
		{Args: []any{"time"}},
		cmd("hgetall", k.lock), cmd("pttl", k.lock), cmd("get", k.fence), cmd("pttl", k.fence),
		cmd("zrange", sem.holds, "0", "-1", "withscores"), cmd("hgetall", sem.info), cmd("get", sem.fence),
		cmd("zrange", rw.holds, "0", "-1", "withscores"), cmd("hgetall", rw.info), cmd("get", rw.fence),
		cmd("zrange", rw.writers, "0", "-1", "withscores"), cmd("zrange", rw.readers, "0", "-1", "withscores"),
		{Args: []any{"pubsub", "numsub", k.channel, sem.channel, rw.channel}},
	}
	replies := b.tr.Do(ctx, cmds)
	for _, r := range replies {
		if r.Err != nil {
			return info, misconfigured(r.Err)
		}
	}
	now, err := replies[0].slice()
	if err != nil || len(now) != 2 {
		return info, fmt.Errorf("redisbackend: TIME returned %v", replies[0].Value)
	}
	secs, _ := Reply{Value: now[0]}.int64()
	micros, _ := Reply{Value: now[1]}.int64()
	serverNow := secs*1000 + micros/1000

	// The plain lock: a field t:TOKEN per hold, holding the server time
	// (ms) at which its lease ends; a hold past it is gone, although no
	// script has dropped it yet.
	fields, _ := replies[1].strMap()
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
		pttl, _ := replies[2].int64()
		info.TTL = time.Duration(max(pttl, 0)) * time.Millisecond
	}
	counter, _ := replies[3].str()
	info.LastFence, _ = strconv.ParseInt(counter, 10, 64)
	counterTTL, _ := replies[4].int64()
	info.CounterTTL = time.Duration(counterTTL) * time.Millisecond
	if counterTTL < 0 {
		info.CounterTTL = -1
	}

	// The semaphore's and the read-write lock's holds: members of a sorted
	// set scored by the server time (ms) at which each lease ends, with
	// their fences (f:TOKEN) and the writer's token in the info hash.
	others := func(r []Reply, kind driver.Kind, into *HoldsInspection) {
		infoFields, _ := r[1].strMap()
		members, _ := r[0].pairs()
		for _, z := range members {
			left := int64(number(z[1])) - serverNow
			token, _ := z[0].(string)
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
		counter, _ := r[2].str()
		into.LastFence, _ = strconv.ParseInt(counter, 10, 64)
		live := func(places Reply) int {
			n := 0
			members, _ := places.pairs()
			for _, z := range members {
				if int64(number(z[1])) > serverNow {
					n++
				}
			}
			return n
		}
		if len(r) > 3 {
			into.WaitingWriters, into.WaitingReaders = live(r[3]), live(r[4])
		}
	}
	others(replies[5:8], driver.KindSemaphore, &info.Semaphore)
	others(replies[8:13], driver.KindRead, &info.RW)
	slices.SortFunc(info.Others, func(a, b driver.HoldInfo) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Fence, b.Fence))
	})

	n := map[string]int64{}
	subs, _ := replies[13].pairs()
	for _, p := range subs {
		name, _ := Reply{Value: p[0]}.str()
		count, _ := Reply{Value: p[1]}.int64()
		n[name] = count
	}
	info.Waiters, info.Semaphore.Waiters, info.RW.Waiters = n[k.channel], n[sem.channel], n[rw.channel]
	return info, nil
}
