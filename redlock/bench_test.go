package redlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redlock"
	"github.com/fencelock/fencelock/testing/benchshape"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkRedlock runs the benchshape workloads over 3 and 5 masters, for
// the cost row of "Choosing one" in docs/backends.md.
func BenchmarkRedlock(b *testing.B) {
	for _, n := range []int{3, 5} {
		b.Run(fmt.Sprintf("masters%d", n), func(b *testing.B) {
			clients := make([]redis.UniversalClient, n)
			for i := range clients {
				rdb := redis.NewClient(&redis.Options{Addr: servertest.Redis(b).Addr(), PoolSize: 256, ContextTimeoutEnabled: true,
					DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
				b.Cleanup(func() { rdb.Close() })
				clients[i] = rdb
			}
			rl, err := redlock.New(clients)
			if err != nil {
				b.Fatal(err)
			}
			c := fencelock.New(rl)
			b.Cleanup(func() { c.Close() })
			benchshape.Run(b, c)
		})
	}
}
