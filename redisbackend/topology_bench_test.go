package redisbackend_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/benchshape"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkTopologies runs the benchshape workloads (one goroutine's
// Acquire+Release cycles, and 64 goroutines on distinct keys) on each
// deployment the Redis backend supports, for the cost row of "Choosing
// one" in docs/backends.md (scripts/bench-backends.sh): a single node; a Sentinel
// group (1 master, 2 replicas, 3 sentinels) without and with
// WithReplicaAck(1); a 3-master Cluster; and a Cluster of 3 masters with a
// replica each, with WithReplicaAck(1).
func BenchmarkTopologies(b *testing.B) {
	ack := []redisbackend.Option{redisbackend.WithReplicaAck(1, 100*time.Millisecond)}
	sentinel := func(b *testing.B) redis.UniversalClient {
		g := servertest.RedisSentinelGroup(b)
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.Name(),
			SentinelAddrs: g.SentinelAddrs(), PoolSize: 256, ContextTimeoutEnabled: true})
	}
	topologies := []struct {
		name string
		rdb  func(b *testing.B) redis.UniversalClient
		opts []redisbackend.Option
	}{
		{"single", func(b *testing.B) redis.UniversalClient {
			srv := servertest.Redis(b)
			return redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 256, ContextTimeoutEnabled: true})
		}, nil},
		{"sentinel", sentinel, nil},
		{"sentinel-ack1", sentinel, ack},
		{"cluster3", func(b *testing.B) redis.UniversalClient {
			cl := servertest.RedisCluster(b, 3)
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 256, ContextTimeoutEnabled: true})
		}, nil},
		{"cluster3x2-ack1", func(b *testing.B) redis.UniversalClient {
			cl := servertest.RedisClusterWithReplicas(b, 3)
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 256, ContextTimeoutEnabled: true})
		}, ack},
	}
	for _, topo := range topologies {
		b.Run(topo.name, func(b *testing.B) {
			rdb := topo.rdb(b)
			b.Cleanup(func() { rdb.Close() })
			c := fencelock.New(redisbackend.New(rdb, topo.opts...))
			b.Cleanup(func() { c.Close() })
			benchshape.Run(b, c)
		})
	}
}
