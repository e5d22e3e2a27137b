package fence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// A holder stalls past its lease; the next holder writes; the stalled
// holder's late write is refused by the store.
func ExampleRedisStore_Write() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	store := fence.NewRedisStore(rdb, "balances")
	ctx := context.Background()

	stalled, _ := locks.TryAcquire(ctx, "account:7", 100*time.Millisecond)
	<-stalled.Done() // a pause longer than the lease

	locks.Do(ctx, "account:7", time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
		return store.Write(ctx, "account:7", lk.Fence(), []byte("120"))
	})

	err := store.Write(ctx, "account:7", stalled.Fence(), []byte("100"))
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStale))
	value, _, _ := store.Read(ctx, "account:7")
	fmt.Println("balance:", string(value))
	// Output:
	// late write refused: true
	// balance: 120
}
