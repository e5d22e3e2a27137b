package fencelock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// Hooks see every acquire, wait, release, renewal and loss: here they print
// them; the fencelockprom module turns them into Prometheus metrics.
func ExampleWithHooks() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	hooks := fencelock.Hooks{
		AcquireDone: func(ctx context.Context, e fencelock.AcquireEvent) {
			fmt.Printf("acquire %s: %v after %d attempt(s)\n", e.Key, e.Outcome, e.Attempts)
		},
		Released: func(ctx context.Context, e fencelock.ReleaseEvent) {
			fmt.Printf("released %s, held %v\n", e.Key, e.Held.Round(time.Minute))
		},
		Lost: func(e fencelock.LostEvent) {
			fmt.Printf("lost %s: %v\n", e.Key, e.Reason)
		},
	}
	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(hooks), fencelock.WithNamespace("example-hooks"))
	defer locks.Close()
	ctx := context.Background()

	lk, err := locks.TryAcquire(ctx, "invoice:8", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	locks.TryAcquire(ctx, "invoice:8", time.Minute) // held: not acquired
	locks.TryAcquire(ctx, "invoice:8", 0)           // a bad ttl: invalid, no attempt
	if err := lk.Release(ctx); err != nil {
		fmt.Println(err)
	}

	// A lock held past its lease without renewal is lost.
	short, err := locks.TryAcquire(ctx, "invoice:9", 50*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	<-short.Done()
	// Output:
	// acquire invoice:8: acquired after 1 attempt(s)
	// acquire invoice:8: not_acquired after 1 attempt(s)
	// acquire invoice:8: invalid after 0 attempt(s)
	// released invoice:8, held 0s
	// acquire invoice:9: acquired after 1 attempt(s)
	// lost invoice:9: deadline
}
