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

// Each instance says who it is; an operator (Inspect here, "fencelock ls"
// or "fencelock inspect" from a shell) then sees which process holds a
// lock, where the owner token alone says nothing.
func ExampleWithIdentity() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// fencelock.DefaultIdentity() is host:pid; a pod name works too.
	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithIdentity("billing-7"))
	defer locks.Close()
	ctx := context.Background()
	if err := locks.Check(ctx); err != nil { // an invalid identity shows here
		fmt.Println(err)
		return
	}

	lk, err := locks.TryAcquire(ctx, "invoices:march", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	info, err := locks.Inspect(ctx, "invoices:march")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held by:", info.Identity)
	if err := lk.Release(ctx); err != nil {
		fmt.Println(err)
	}
	// Output: held by: billing-7
}
