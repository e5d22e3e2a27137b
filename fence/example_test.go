package fence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// A holder stalls past its lease; the next holder writes; the stalled
// holder's late write is refused by the store.
func ExampleRedisStore_Write() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	store := fence.NewRedisStore(rdb, "balances")
	ctx := context.Background()

	stalled, err := locks.TryAcquire(ctx, "account:7", 100*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	<-stalled.Done() // a pause longer than the lease

	err = locks.Do(ctx, "account:7", time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
		return store.Write(ctx, "account:7", lk.Fence(), []byte("120"))
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	err = store.Write(ctx, "account:7", stalled.Fence(), []byte("100"))
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStale))
	value, _, err := store.Read(ctx, "account:7")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("balance:", string(value))
	// Output:
	// late write refused: true
	// balance: 120
}
