package fencelock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// A service elects one instance to run its scheduler. The leader works
// until its leadership ends, writes with its term, and resigns on shutdown,
// which wakes the next candidate at once.
func ExampleClient_Campaign() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
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

	workCtx, cancel := leadership.Context(ctx) // cancelled if leadership is lost
	_ = workCtx
	cancel()
	fmt.Println("resign:", leadership.Resign(ctx))
	// Output:
	// leading, term > 0: true
	// leader: host-1:4242 <nil>
	// resign: <nil>
}

// Observe yields the current leader, then every change.
func ExampleClient_Observe() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
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
	go func() {
		time.Sleep(100 * time.Millisecond)
		first.Resign(ctx)
	}()
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
	}
	// Output:
	// leader: node-1
	// no leader
}
