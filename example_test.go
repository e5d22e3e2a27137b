package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// A scheduled job that must run on one instance only: whoever gets the lock
// runs it, the others skip this round.
func ExampleClient_TryAcquire() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()

	lk, err := locks.TryAcquire(ctx, "job:daily-report", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("running the report")

	// Another instance trying now is told the lock is taken.
	_, err = locks.TryAcquire(ctx, "job:daily-report", time.Minute)
	if errors.Is(err, fencelock.ErrNotAcquired) {
		fmt.Println("another instance skips this round")
	}
	if err := lk.Release(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// running the report
	// another instance skips this round
}

// Waiting for a lock, at most five seconds: a release wakes the waiter at once.
func ExampleClient_Acquire() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// WaitStart is called as an acquire begins to wait for a held lock.
	waiting := make(chan struct{}, 1)
	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(fencelock.Hooks{
		WaitStart: func(context.Context, fencelock.WaitEvent) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		},
	}))
	defer locks.Close()
	ctx := context.Background()

	first, err := locks.TryAcquire(ctx, "invoice:7", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() {
		<-waiting // the first holder releases once the other caller waits
		if err := first.Release(ctx); err != nil {
			fmt.Println(err)
		}
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
	fmt.Println("got it after the first holder; newer fence:", lk.Fence() > first.Fence())
	if err := lk.Release(ctx); err != nil {
		fmt.Println(err)
	}
	// Output: got it after the first holder; newer fence: true
}

// errSoldOut is what an order for a product out of stock gets.
var errSoldOut = errors.New("sold out")

// Stock deduction under a per-product lock: Do waits for the lock, renews it
// while the function runs, and releases it afterwards. The stock is written
// through a fenced store with the lock's fence, so a holder that lost the
// lock while it worked (paused past its lease) has its write refused
// (fence.ErrStale) instead of overwriting a newer holder's. 100 concurrent
// orders for 10 items sell exactly 10.
func ExampleClient_Do() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	stock := fence.NewRedisStore(rdb, "stock")
	ctx := context.Background()

	// deduct takes one item, under the product's lock.
	deduct := func(ctx context.Context, lk *fencelock.Lock) error {
		value, _, err := stock.Read(ctx, "product:42")
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(string(value))
		if err != nil {
			return err
		}
		if n <= 0 {
			return errSoldOut
		}
		return stock.Write(ctx, "product:42", lk.Fence(), []byte(strconv.Itoa(n-1)))
	}

	// Ten items arrive, written under the lock like every change.
	err := locks.Do(ctx, "product:42", 10*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
		return stock.Write(ctx, "product:42", lk.Fence(), []byte("10"))
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var (
		orders        sync.WaitGroup
		mu            sync.Mutex
		sold, refused int
	)
	for range 100 {
		orders.Go(func() {
			err := locks.Do(ctx, "product:42", 10*time.Second, deduct)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				sold++
			case errors.Is(err, errSoldOut):
				refused++
			default: // the lock lost (a late write refused), Redis down...
				fmt.Println(err)
			}
		})
	}
	orders.Wait()
	left, _, err := stock.Read(ctx, "product:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("sold:", sold, "refused:", refused, "left:", string(left))
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
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	ctx := context.Background()
	acct := &account{}

	slow, err := locks.TryAcquire(ctx, "account:1", 500*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	<-slow.Done() // paused past its lease (a GC pause, a stalled VM...)
	fmt.Println("slow holder:", slow.Err())

	next, err := locks.Acquire(ctx, "account:1", time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("next holder writes:", acct.set(200, next.Fence()))
	if err := next.Release(ctx); err != nil {
		fmt.Println(err)
	}

	err = acct.set(100, slow.Fence()) // the late write
	fmt.Println("slow holder's late write refused:", err != nil)
	// Output:
	// slow holder: fencelock: lock lost: the lease deadline passed without a successful renewal
	// next holder writes: <nil>
	// slow holder's late write refused: true
}
