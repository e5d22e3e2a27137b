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
	// WaitStart is called as an acquire begins to wait: a fair waiter has
	// its place in line by then.
	inLine := make(chan struct{}, 3)
	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(fencelock.Hooks{
		WaitStart: func(context.Context, fencelock.WaitEvent) { inLine <- struct{}{} },
	}))
	defer locks.Close()
	ctx := context.Background()

	first, err := locks.Acquire(ctx, "printer", 30*time.Second, fencelock.WithFairness())
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan string, 3)
	var wg sync.WaitGroup // the example ends after their releases
	for _, name := range []string{"alice", "bob", "carol"} {
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
		<-inLine // this one joins the line before the next one comes
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
