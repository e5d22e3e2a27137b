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

// At most two exports run at a time, across every instance: each holds a
// permit, and a third caller is refused (or, with Acquire, waits).
func ExampleClient_Semaphore() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	release := func(lk *fencelock.Lock) {
		if err := lk.Release(ctx); err != nil {
			fmt.Println(err)
		}
	}

	exports := locks.Semaphore("exports", 2)
	first, err := exports.TryAcquire(ctx, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	second, err := exports.TryAcquire(ctx, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("two exports running; fences increase:", second.Fence() > first.Fence())

	if _, err := exports.TryAcquire(ctx, time.Minute); errors.Is(err, fencelock.ErrNotAcquired) {
		fmt.Println("a third export is refused")
	}
	release(first)
	third, err := exports.Acquire(ctx, time.Minute, fencelock.WithWait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after a release, the third export runs")
	release(second)
	release(third)
	// Output:
	// two exports running; fences increase: true
	// a third export is refused
	// after a release, the third export runs
}

// Readers share a document; a writer waits for them, and while it waits,
// new readers wait for it.
func ExampleClient_RWLock() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// WaitStart is called as an acquire begins to wait: its first attempt
	// was refused (a writer's intent is on the server by then).
	writerWaits := make(chan struct{}, 1)
	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(fencelock.Hooks{
		WaitStart: func(context.Context, fencelock.WaitEvent) {
			select {
			case writerWaits <- struct{}{}:
			default:
			}
		},
	}))
	defer locks.Close()
	ctx := context.Background()

	release := func(lk *fencelock.Lock) {
		if err := lk.Release(ctx); err != nil {
			fmt.Println(err)
		}
	}

	doc := locks.RWLock("doc:7")
	r1, err := doc.AcquireRead(ctx, 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	r2, err := doc.AcquireRead(ctx, 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("two readers hold the document")

	written := make(chan int64)
	go func() {
		w, err := doc.AcquireWrite(ctx, 30*time.Second) // waits for both readers
		if err != nil {
			fmt.Println(err)
			close(written)
			return
		}
		release(w) // before telling: the example then waits for it
		written <- w.Fence()
	}()
	// Once the writer waits (its intent is on the server), new readers
	// wait for it.
	<-writerWaits
	r, err := doc.TryAcquireRead(ctx, 30*time.Second)
	switch {
	case errors.Is(err, fencelock.ErrNotAcquired):
		fmt.Println("a new reader waits for the writer")
	case err != nil:
		fmt.Println(err)
		return
	default:
		fmt.Println("a new reader got in before the writer")
		release(r)
	}
	release(r1)
	release(r2)
	fence := <-written
	fmt.Println("the writer ran after the readers; its fence is larger:", fence > r2.Fence())
	// Output:
	// two readers hold the document
	// a new reader waits for the writer
	// the writer ran after the readers; its fence is larger: true
}
