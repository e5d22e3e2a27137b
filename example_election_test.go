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

// A service elects one instance to run its scheduler. The leader works
// until its leadership ends, writes with its term, and resigns on shutdown,
// which wakes the next candidate at once.
func ExampleClient_Campaign() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	leadership, err := locks.Campaign(ctx, "scheduler", "host-1:4242", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("leading, term > 0:", leadership.Term() > 0)

	// Anyone can ask who leads, or range over Observe for every change.
	leader, err := locks.Leader(ctx, "scheduler")
	fmt.Println("leader:", leader.ID, err)

	// The leader's work runs on a context cancelled if leadership is lost.
	workCtx, cancel := leadership.Context(ctx)
	fmt.Println("working:", workCtx.Err() == nil)
	cancel()
	fmt.Println("resign:", leadership.Resign(ctx))
	// Output:
	// leading, term > 0: true
	// leader: host-1:4242 <nil>
	// working: true
	// resign: <nil>
}

// Observe yields the current leader, then every change.
func ExampleClient_Observe() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	first, err := locks.Campaign(ctx, "indexer", "node-1", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	for leader, err := range locks.Observe(ctx, "indexer") {
		if err != nil {
			fmt.Println(err)
			return
		}
		if leader.ID == "" {
			fmt.Println("no leader")
			break
		}
		fmt.Println("leader:", leader.ID)
		// The leader steps down: the next value says so.
		if err := first.Resign(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	// Output:
	// leader: node-1
	// no leader
}
