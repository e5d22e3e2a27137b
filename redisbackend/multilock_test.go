package redisbackend_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// AcquireAll on real servers, single node and Cluster (the keys then live
// on different nodes): callers in several Clients list overlapping keys in
// different orders; none deadlocks, no key ever has two holders (a counter
// per key on the server), and each key's fences rise.
func TestAcquireAllReal(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := servertest.Redis(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		acquireAllReal(t, rdb, func() redis.UniversalClient {
			r := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { r.Close() })
			return r
		})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := servertest.RedisCluster(t, 3)
		rdb := newClusterRDB(t, cl, nil)
		acquireAllReal(t, rdb, func() redis.UniversalClient { return newClusterRDB(t, cl, nil) })
	})
}

func acquireAllReal(t *testing.T, counters redis.UniversalClient, newRDB func() redis.UniversalClient) {
	ctx := topoCtx(t, 2*time.Minute)
	orders := [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "c"}, {"a", "c"}}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last = map[string]int64{}
	)
	for i, keys := range orders {
		c := newTopoClient(t, newRDB())
		wg.Go(func() {
			for range 25 {
				err := c.DoAll(ctx, keys, 10*time.Second, func(ctx context.Context, m *fencelock.MultiLock) error {
					for _, k := range keys {
						if n := counters.Incr(ctx, "inside:{"+k+"}").Val(); n != 1 {
							return fmt.Errorf("caller %d: %d holders of %s at once", i, n, k)
						}
					}
					mu.Lock()
					for _, lk := range m.Locks() {
						k, f := lk.Key(), lk.Fence()
						if f <= last[k] {
							mu.Unlock()
							return fmt.Errorf("fence of %s went from %d to %d", k, last[k], f)
						}
						last[k] = f
					}
					mu.Unlock()
					// The hold spans the counters' round trips to the
					// servers, in and out: another holder of a key in
					// between would count 2.
					for _, k := range keys {
						counters.Decr(ctx, "inside:{"+k+"}")
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
