package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// A scheduled job that must run on one instance only: whoever gets the lock
// runs it, the others skip this round.
func ExampleClient_TryAcquire() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	lk, err := locks.TryAcquire(ctx, "job:daily-report", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lk.Release(ctx)
	fmt.Println("running the report")

	// Another instance trying now is told the lock is taken.
	_, err = locks.TryAcquire(ctx, "job:daily-report", time.Minute)
	if errors.Is(err, fencelock.ErrNotAcquired) {
		fmt.Println("another instance skips this round")
	}
	// Output:
	// running the report
	// another instance skips this round
}

// Waiting for a lock, at most five seconds: a release wakes the waiter at once.
func ExampleClient_Acquire() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	first, err := locks.TryAcquire(ctx, "invoice:7", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // the first holder works a little
		first.Release(ctx)
	}()

	lk, err := locks.Acquire(ctx, "invoice:7", 30*time.Second, fencelock.WithWait(5*time.Second))
	if errors.Is(err, fencelock.ErrNotAcquired) {
		fmt.Println("busy, try later")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lk.Release(ctx)
	fmt.Println("got it after the first holder; newer fence:", lk.Fence() > first.Fence())
	// Output: got it after the first holder; newer fence: true
}

// Stock deduction under a per-product lock: Do waits for the lock, renews it
// while the function runs, and releases it afterwards. 100 concurrent
// orders for 10 items sell exactly 10.
func ExampleClient_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	rdb.Set(ctx, "stock:42", 10, 0)
	var sold sync.WaitGroup
	var mu sync.Mutex
	soldCount, refusedCount := 0, 0
	for range 100 {
		sold.Go(func() {
			err := locks.Do(ctx, "product:42", 10*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
				stock, err := rdb.Get(ctx, "stock:42").Int()
				if err != nil {
					return err
				}
				if stock <= 0 {
					return errors.New("sold out")
				}
				return rdb.Set(ctx, "stock:42", stock-1, 0).Err()
			})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				soldCount++
			} else {
				refusedCount++
			}
		})
	}
	sold.Wait()
	fmt.Println("sold:", soldCount, "refused:", refusedCount, "left:", rdb.Get(ctx, "stock:42").Val())
	// Output: sold: 10 refused: 90 left: 0
}

// account is a resource that checks fencing tokens: it refuses a write whose
// fence is lower than one it has already accepted. (The fence package
// provides such stores on Redis and SQL; here, a map guarded by a mutex.)
type account struct {
	mu      sync.Mutex
	balance int
	fence   int64
}

func (a *account) set(balance int, fence int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fence < a.fence {
		return fmt.Errorf("stale write: fence %d is older than %d", fence, a.fence)
	}
	a.balance, a.fence = balance, fence
	return nil
}

// Fencing: a holder that was paused past its lease writes late, after the
// next holder. Its lower fence gets the late write refused.
func ExampleLock_Fence() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()
	acct := &account{}

	slow, _ := locks.TryAcquire(ctx, "account:1", 500*time.Millisecond)
	<-slow.Done() // paused past its lease (a GC pause, a stalled VM...)
	fmt.Println("slow holder:", slow.Err())

	next, _ := locks.Acquire(ctx, "account:1", time.Second)
	fmt.Println("next holder writes:", acct.set(200, next.Fence()))
	next.Release(ctx)

	err := acct.set(100, slow.Fence()) // the late write
	fmt.Println("slow holder's late write refused:", err != nil)
	// Output:
	// slow holder: fencelock: lock lost: the lease deadline passed without a successful renewal
	// next holder writes: <nil>
	// slow holder's late write refused: true
}
