package redisbackend_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/driver/drivertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// driverAckTimeout bounds the wait for a replica's acknowledgement in
// TestDriver. WAIT returns as soon as the replica acknowledges, so the
// bound costs nothing; on a busy machine an acknowledgement can take over a
// second, and the suite counts ErrNotReplicated as a failure.
const driverAckTimeout = 10 * time.Second

// The Redis backend keeps the driver contract, for every kind of hold, on
// every topology it supports: a single node (with and without replica
// acknowledgement), a Sentinel group with replicas, and a Cluster, with and
// without replicas.
func TestDriver(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := servertest.Redis(t)
		drivertest.Run(t, func(t *testing.T) driver.Store {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			b := redisbackend.New(rdb)
			t.Cleanup(func() { b.Close(); rdb.Close() })
			return b
		})
	})
	t.Run("replica-ack", func(t *testing.T) {
		rdb, _ := masterWithReplica(t)
		drivertest.Run(t, func(t *testing.T) driver.Store {
			b := redisbackend.New(rdb, redisbackend.WithReplicaAck(1, driverAckTimeout))
			t.Cleanup(func() { b.Close() })
			return b
		})
	})
	t.Run("sentinel-replicas", func(t *testing.T) {
		group := servertest.RedisSentinelGroup(t)
		rdb := servertest.FailoverClient(t, group)
		drivertest.Run(t, func(t *testing.T) driver.Store {
			b := redisbackend.New(rdb)
			t.Cleanup(func() { b.Close() })
			return b
		})
		t.Run("replica-ack", func(t *testing.T) {
			drivertest.Run(t, func(t *testing.T) driver.Store {
				b := redisbackend.New(rdb, redisbackend.WithReplicaAck(1, driverAckTimeout))
				t.Cleanup(func() { b.Close() })
				return b
			})
		})
	})
	t.Run("cluster-replicas", func(t *testing.T) {
		cluster := servertest.RedisClusterWithReplicas(t, 3)
		rdb := servertest.ClusterClient(t, cluster)
		drivertest.Run(t, func(t *testing.T) driver.Store {
			b := redisbackend.New(rdb, redisbackend.WithReplicaAck(1, driverAckTimeout))
			t.Cleanup(func() { b.Close() })
			return b
		})
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := servertest.RedisCluster(t, 3)
		drivertest.Run(t, func(t *testing.T) driver.Store {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
			b := redisbackend.New(rdb)
			t.Cleanup(func() { b.Close(); rdb.Close() })
			return b
		})
	})
}
