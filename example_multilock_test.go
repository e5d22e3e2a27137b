package fencelock_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// Moving stock between two warehouses needs both locks: DoAll takes them
// in a fixed order (no deadlock with a transfer the other way), runs the
// function while holding both, and releases both.
func ExampleClient_DoAll() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	keys := []string{"stock:berlin:42", "stock:paris:42"}
	err := locks.DoAll(ctx, keys, 10*time.Second, func(ctx context.Context, m *fencelock.MultiLock) error {
		// Each key has a fence of its own: pass each to the store of its warehouse.
		berlin, paris := m.Lock(keys[0]).Fence(), m.Lock(keys[1]).Fence()
		fmt.Println("holding", len(m.Locks()), "locks, fenced:", berlin > 0 && paris > 0)
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// holding 2 locks, fenced: true
	// done: <nil>
}
