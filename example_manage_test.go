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

// A task that never stops by itself is cut off after its maximum hold: its
// context is cancelled and the lock is released for the others, however
// often it was renewed.
func ExampleWithMaxHold() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	err := locks.Do(ctx, "export:stuck", 10*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
		<-ctx.Done() // stuck until told to stop
		fmt.Println("told to stop:", errors.Is(context.Cause(ctx), fencelock.ErrMaxHoldExceeded))
		return nil
	}, fencelock.WithMaxHold(200*time.Millisecond))
	fmt.Println("lost:", errors.Is(err, fencelock.ErrLost))
	// Output:
	// told to stop: true
	// lost: true
}

// A lock taken in one request and released in another, which has only the
// key and the owner token.
func ExampleClient_ReleaseToken() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	// Request 1: take the lock, hand the token to the caller.
	lk, err := locks.TryAcquire(ctx, "upload:91", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	token := lk.Token()

	// Request 2: release it by token. A wrong token releases nothing.
	if _, err := locks.ReleaseToken(ctx, "upload:91", "forged"); errors.Is(err, fencelock.ErrNotHeld) {
		fmt.Println("wrong token: not held")
	}
	remaining, err := locks.ReleaseToken(ctx, "upload:91", token)
	fmt.Println("released, holds left:", remaining, err)
	// Output:
	// wrong token: not held
	// released, holds left: 0 <nil>
}

// An operator looks at a lock that seems stuck, then frees it. The reason
// is logged at Warn level; the next holder still gets a larger fence.
func ExampleClient_ForceRelease() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	stuck, err := locks.TryAcquire(ctx, "billing:run", time.Hour)
	if err != nil {
		fmt.Println(err)
		return
	}

	info, err := locks.Inspect(ctx, "billing:run")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held:", info.Held, "holds:", len(info.Holds), "owner is the token:", info.Owner == stuck.Token())

	if _, err := locks.ForceRelease(ctx, "billing:run", "worker host lost (INC-4411)"); err != nil {
		fmt.Println(err)
		return
	}
	next, err := locks.TryAcquire(ctx, "billing:run", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("taken again, larger fence:", next.Fence() > stuck.Fence())
	if err := next.Release(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// held: true holds: 1 owner is the token: true
	// taken again, larger fence: true
}
