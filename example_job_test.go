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

// Every instance's scheduler calls RunJob for each tick; one runs it. Here
// two instances fire for the same tick of a job run every minute.
func ExampleClient_RunJob() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	job := fencelock.Job{
		Name:        "cleanup",
		Period:      time.Minute,
		LockAtLeast: 10 * time.Second, // above the instances' clock skew
		LockAtMost:  5 * time.Minute,  // a crashed run frees the job after this
	}
	tick := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // the tick's scheduled time

	for _, instance := range []string{"a", "b"} {
		locks := fencelock.New(redisbackend.New(rdb))
		ran, err := locks.RunJob(ctx, job, tick, func(ctx context.Context, run *fencelock.Lock) error {
			fmt.Println("instance", instance, "runs the cleanup")
			return nil
		})
		fmt.Println("instance", instance, "ran:", ran, err)
		locks.Close()
	}
	// Output:
	// instance a runs the cleanup
	// instance a ran: true <nil>
	// instance b ran: false <nil>
}
