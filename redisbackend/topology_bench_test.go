package redisbackend_test

import (
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/benchshape"
	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// BenchmarkTopologies runs the benchshape workloads (one goroutine's
// Acquire+Release cycles, and 64 goroutines on distinct keys) on each
// deployment the Redis backend supports, for the README's "Choosing a
// backend" table: a single node, a master found through Sentinel, and a
// 3-master Cluster.
func BenchmarkTopologies(b *testing.B) {
	topologies := []struct {
		name string
		rdb  func(b *testing.B) redis.UniversalClient
	}{
		{"single", func(b *testing.B) redis.UniversalClient {
			srv := servertest.Redis(b)
			return redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 256, ContextTimeoutEnabled: true})
		}},
		{"sentinel", func(b *testing.B) redis.UniversalClient {
			_, sentinel := servertest.RedisSentinel(b)
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: servertest.SentinelMaster,
				SentinelAddrs: []string{sentinel.Addr()}, PoolSize: 256, ContextTimeoutEnabled: true})
		}},
		{"cluster3", func(b *testing.B) redis.UniversalClient {
			cl := servertest.RedisCluster(b, 3)
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 256, ContextTimeoutEnabled: true})
		}},
	}
	for _, topo := range topologies {
		b.Run(topo.name, func(b *testing.B) {
			rdb := topo.rdb(b)
			b.Cleanup(func() { rdb.Close() })
			c := fencelock.New(redisbackend.New(rdb))
			b.Cleanup(func() { c.Close() })
			benchshape.Run(b, c)
		})
	}
}
