package redisbackend_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/driver/drivertest"
	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// The Redis backend keeps the driver contract, for every kind of hold, on
// a single node with and without replica acknowledgement.
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
			b := redisbackend.New(rdb, redisbackend.WithReplicaAck(1, time.Second))
			t.Cleanup(func() { b.Close() })
			return b
		})
	})
}
