package lockmodel

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/faultproxy"
	"github.com/redis/go-redis/v9"
)

// ServerStore is a Store on real servers: every Client gets a store of
// its own, and the plain locks are read with Inspector. Each check uses a
// namespace of its own (NewServerStore), so one server serves them all.
type ServerStore struct {
	// NewBackend makes the store of one Client.
	NewBackend func() driver.Store
	// Inspector reads the plain locks (nil: View reports nothing). The
	// semaphore's and read-write lock's holds are not read.
	Inspector driver.Inspector
	// OnClose, if set, runs when the check ends.
	OnClose func()
	// HoldsView, if set, reads the semaphore's and read-write lock's
	// holds.
	HoldsView func(fam Family, key string) (View, bool)

	ns string
}

var namespaces atomic.Int64

// NewServerStore returns s with a namespace new in this process.
func NewServerStore(s ServerStore) *ServerStore {
	s.ns = fmt.Sprintf("lockmodel-%d-%d", time.Now().UnixNano()%1e6, namespaces.Add(1))
	return &s
}

func (s *ServerStore) Backend() driver.Store { return s.NewBackend() }
func (s *ServerStore) Namespace() string     { return s.ns }

func (s *ServerStore) Close() {
	if s.OnClose != nil {
		s.OnClose()
	}
}

func (s *ServerStore) View(fam Family, key string) (View, bool) {
	if fam != FamLock {
		if s.HoldsView == nil {
			return View{}, false
		}
		return s.HoldsView(fam, key)
	}
	if s.Inspector == nil {
		return View{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.Inspector.InspectLock(ctx, s.ns, key)
	if err != nil {
		return View{}, false
	}
	now := time.Now()
	v := View{Counter: info.LastFence}
	for _, h := range info.Holds {
		v.Holds = append(v.Holds, Hold{Token: h.Token, End: now.Add(h.TTL)})
	}
	return v, true
}

// Redis is the target of a real redis-server at addr, in real time: every
// operation but the store's faults, fewer steps than on the memory backend,
// and leases long enough for a busy machine. Each Client reaches the server
// through a TCP proxy of its own (testing/faultproxy), which OpPartition
// blackholes: its locks then lapse on the server unreleased, as a holder's
// that is frozen or cut off would. Semaphores and read-write locks are read
// from their keys (see redisbackend's holds.go).
func Redis(t TB, addr string) Target {
	return Target{
		Name: "redis",
		NewStore: func(TB) Store {
			rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			inspector := redisbackend.New(rdb)
			s := NewServerStore(ServerStore{
				Inspector: inspector,
				OnClose: func() {
					inspector.Close()
					rdb.Close()
				},
			})
			s.NewBackend = func() driver.Store { return newProxiedRedis(t, addr) }
			s.HoldsView = func(fam Family, key string) (View, bool) { return RedisHolds(rdb, s.ns, fam, key) }
			return s
		},
		Features: Semaphores | RWLocks | Fairness | Inspect | Partitions,
		Clients:  3,
		TTLs:     []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second},
		Waits:    []time.Duration{0, 50 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second},
		Advances: []time.Duration{time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond},
		Cuts:     []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second},
		Job:      fencelock.Job{Period: 2 * time.Second, LockAtLeast: 500 * time.Millisecond, LockAtMost: 1500 * time.Millisecond},
		Permits:  2,
		// A waiter woken late by a busy machine, a release retried: a
		// second is many times what either takes on two loaded cores.
		Tolerance: 2 * time.Second,
		Checks:    25,
		Steps:     40,
	}
}

// proxiedRedis is the Redis backend of one Client, through a proxy of its
// own that Cut blackholes (Partitioner).
type proxiedRedis struct {
	*redisbackend.Backend
	rdb   *redis.Client
	proxy *faultproxy.Proxy
}

func newProxiedRedis(t TB, addr string) *proxiedRedis {
	proxy, err := faultproxy.Start(addr)
	if err != nil {
		t.Fatalf("lockmodel: %v", err)
	}
	// Requests bounded by their contexts, no retries (the Client
	// decides), a short dial: as the Redis backend asks.
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	return &proxiedRedis{Backend: redisbackend.New(rdb), rdb: rdb, proxy: proxy}
}

// Cut implements Partitioner.
func (b *proxiedRedis) Cut(on bool) { b.proxy.Blackhole(on) }

// Close closes the backend, then its connections and proxy.
func (b *proxiedRedis) Close() error {
	err := b.Backend.Close()
	b.rdb.Close()
	b.proxy.Close()
	return err
}

// RedisHolds reads a semaphore's or read-write lock's live holds in
// namespace ns from its keys on a redis-server: the sorted set of holds
// (score: when each lease ends, server ms), the writer's token and the
// fence counter. It is the ServerStore.HoldsView of a target on Redis.
func RedisHolds(rdb *redis.Client, ns string, fam Family, key string) (View, bool) {
	kind := "sem"
	if fam == FamRW {
		kind = "rw"
	}
	base := ns + ":{" + key + "}:" + kind
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pipe := rdb.Pipeline()
	now := pipe.Time(ctx)
	holds := pipe.ZRangeWithScores(ctx, base, 0, -1)
	writer := pipe.HGet(ctx, base+":info", "writer")
	fence := pipe.Get(ctx, base+":fence")
	pipe.Exec(ctx) // a missing key is a nil reply, not a failure
	local := time.Now()
	if now.Err() != nil || holds.Err() != nil {
		return View{}, false
	}
	serverMs := now.Val().UnixMilli()
	v := View{WriterMark: writer.Val()}
	v.Counter, _ = fence.Int64()
	for _, z := range holds.Val() {
		if left := int64(z.Score) - serverMs; left > 0 {
			token := z.Member.(string)
			v.Holds = append(v.Holds, Hold{Token: token, End: local.Add(time.Duration(left) * time.Millisecond), Write: fam == FamRW && token == v.WriterMark})
		}
	}
	return v, true
}
