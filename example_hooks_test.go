package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// Hooks see every acquire, wait, release, renewal and loss: here they print
// them; the fencelockprom module turns them into Prometheus metrics.
func ExampleWithHooks() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
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
	if _, err := locks.TryAcquire(ctx, "invoice:8", time.Minute); !errors.Is(err, fencelock.ErrNotAcquired) {
		fmt.Println("held, yet:", err)
	}
	if _, err := locks.TryAcquire(ctx, "invoice:8", 0); !errors.Is(err, fencelock.ErrInvalidArgument) {
		fmt.Println("a ttl of 0, yet:", err) // invalid: no attempt is made
	}
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
