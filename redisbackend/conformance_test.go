package redisbackend_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// The Redis backend keeps the Backend contract on every topology it
// supports: a single node (with and without replica acknowledgement), a
// Sentinel group with replicas, and a Cluster, with and without replicas.
func TestConformance(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := servertest.Redis(t)
		fencelocktest.Run(t, func(t *testing.T) fencelock.Backend {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			b := redisbackend.New(rdb)
			t.Cleanup(func() { b.Close(); rdb.Close() })
			return b
		})
	})
	t.Run("replica-ack", func(t *testing.T) {
		rdb, _ := masterWithReplica(t)
		fencelocktest.Run(t, func(t *testing.T) fencelock.Backend {
			b := redisbackend.New(rdb, redisbackend.WithReplicaAck(1, time.Second))
			t.Cleanup(func() { b.Close() })
			return b
		})
	})
	t.Run("sentinel-replicas", func(t *testing.T) {
		group := servertest.RedisSentinelGroup(t)
		rdb := servertest.FailoverClient(t, group)
		fencelocktest.Run(t, func(t *testing.T) fencelock.Backend {
			b := redisbackend.New(rdb)
			t.Cleanup(func() { b.Close() })
			return b
		})
		t.Run("replica-ack", func(t *testing.T) {
			fencelocktest.Run(t, func(t *testing.T) fencelock.Backend {
				b := redisbackend.New(rdb, redisbackend.WithReplicaAck(1, time.Second))
				t.Cleanup(func() { b.Close() })
				return b
			})
		})
	})
	t.Run("cluster-replicas", func(t *testing.T) {
		cluster := servertest.RedisClusterWithReplicas(t, 3)
		rdb := servertest.ClusterClient(t, cluster)
		fencelocktest.Run(t, func(t *testing.T) fencelock.Backend {
			b := redisbackend.New(rdb, redisbackend.WithReplicaAck(1, time.Second))
			t.Cleanup(func() { b.Close() })
			return b
		})
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := servertest.RedisCluster(t, 3)
		fencelocktest.Run(t, func(t *testing.T) fencelock.Backend {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
			b := redisbackend.New(rdb)
			t.Cleanup(func() { b.Close(); rdb.Close() })
			return b
		})
	})
}
