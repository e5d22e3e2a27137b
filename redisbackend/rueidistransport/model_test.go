package rueidistransport_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisbackend/rueidistransport"
	"github.com/fencelock/fencelock/testing/lockmodel"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The model of every feature together (testing/lockmodel) on a real
// redis-server whose Clients take turns between the two transports: the
// first on rueidis, the next on go-redis, and so on, so that every step
// mixes locks, waits, renewals and hand-offs of both over the same keys.
// The store's faults and partitions are left to the go-redis model.
func TestModelMixedTransports(t *testing.T) {
	srv := servertest.Redis(t)
	lockmodel.Run(t, lockmodel.Target{
		Name: "redis, rueidis and go-redis",
		NewStore: func(tb lockmodel.TB) lockmodel.Store {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
			client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
			if err != nil {
				tb.Fatalf("rueidis.NewClient: %v", err)
			}
			inspector := redisbackend.New(rdb)
			clients := 0
			s := lockmodel.NewServerStore(lockmodel.ServerStore{
				NewBackend: func() driver.Store {
					clients++
					if clients%2 == 1 {
						return rueidistransport.NewBackend(client)
					}
					return redisbackend.New(rdb)
				},
				Inspector: inspector,
				OnClose: func() {
					inspector.Close()
					client.Close()
					rdb.Close()
				},
			})
			// The semaphore's and read-write lock's holds are read from
			// the server too: only there can the model see that a
			// ForceRelease took a hold whose acquire returned after it.
			s.HoldsView = func(fam lockmodel.Family, key string) (lockmodel.View, bool) {
				return lockmodel.RedisHolds(rdb, s.Namespace(), fam, key)
			}
			return s
		},
		Features:  lockmodel.Semaphores | lockmodel.RWLocks | lockmodel.Fairness | lockmodel.Inspect,
		Clients:   3,
		TTLs:      []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second},
		Waits:     []time.Duration{0, 50 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second},
		Advances:  []time.Duration{time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond},
		Job:       fencelock.Job{Period: 2 * time.Second, LockAtLeast: 500 * time.Millisecond, LockAtMost: 1500 * time.Millisecond},
		Permits:   2,
		Tolerance: 2 * time.Second,
		Checks:    8,
		Steps:     30,
	})
}
