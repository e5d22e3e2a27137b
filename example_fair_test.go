package fencelock_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// Waiters in line: with WithFairness the lock goes round in the order the
// waiters first found it held, whichever process they are in.
func ExampleWithFairness() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	first, err := locks.Acquire(ctx, "printer", 30*time.Second, fencelock.WithFairness())
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan string, 3)
	var wg sync.WaitGroup // the example ends after their releases
	for i, name := range []string{"alice", "bob", "carol"} {
		wg.Go(func() {
			lk, err := locks.Acquire(ctx, "printer", 30*time.Second, fencelock.WithFairness())
			if err != nil {
				done <- err.Error()
				return
			}
			done <- name
			if err := lk.Release(ctx); err != nil {
				fmt.Println(err)
			}
		})
		// Let this one join the line (the sorted set lock:{printer}:queue)
		// before the next one comes.
		for rdb.ZCard(ctx, "lock:{printer}:queue").Val() < int64(i+1) {
			time.Sleep(time.Millisecond)
		}
	}
	if err := first.Release(ctx); err != nil {
		fmt.Println(err)
	}
	for range 3 {
		fmt.Println(<-done)
	}
	wg.Wait()
	// Output:
	// alice
	// bob
	// carol
}
