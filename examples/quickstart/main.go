// Command quickstart shows fencelock at work against a real Redis: several
// "instances" (Clients, as if in separate processes) sell a limited stock
// under one lock, a waiter is woken the moment the lock is released, and a
// holder that stalls past its lease learns of the loss and has its late
// write refused by its fencing token.
//
// It uses REDIS_URL (for example redis://localhost:6379/0) when set, and
// otherwise starts a private redis-server on a free port.
//
// Exit status, as for every fencelock command: 0 the tour ran and every
// check held, 1 a check failed (the lock did not hold, a stale write was
// accepted), 2 it could not run (no redis-server, Redis unreachable).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/examples/internal/exitcode"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/redis/go-redis/v9"
)

func main() {
	log.SetFlags(0)
	os.Exit(mainStatus(os.Stderr))
}

// errCheck is matched by the errors of a check that failed: the tour ran,
// and the lock or the fence did not do its job.
var errCheck = errors.New("check failed")

// mainStatus takes the tour and returns the exit status.
func mainStatus(stderr io.Writer) int {
	rdb, stop, err := connect()
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("quickstart", err))
		return exitcode.CouldNotRun
	}
	defer stop()
	if err := run(context.Background(), rdb); err != nil {
		fmt.Fprintln(stderr, exitcode.Message("quickstart", err))
		if errors.Is(err, errCheck) {
			return exitcode.Fail
		}
		return exitcode.CouldNotRun
	}
	return exitcode.OK
}

// run takes the tour on rdb, under a namespace of its own that it removes
// at the end.
func run(ctx context.Context, rdb *redis.Client) error {
	namespace := fmt.Sprintf("quickstart-%d", time.Now().UnixNano())
	defer cleanUp(ctx, rdb, namespace)
	newClient := func() *fencelock.Client {
		return fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace(namespace))
	}
	if err := sellStock(ctx, rdb, newClient, namespace); err != nil {
		return err
	}
	if err := wakeOnRelease(ctx, newClient); err != nil {
		return err
	}
	return fencing(ctx, newClient)
}

// sellStock: 3 instances × 20 buyers want one item each; there are 25.
func sellStock(ctx context.Context, rdb *redis.Client, newClient func() *fencelock.Client, ns string) error {
	const instances, buyers, stock = 3, 20, 25
	stockKey := ns + ":stock"
	if err := rdb.Set(ctx, stockKey, stock, 0).Err(); err != nil {
		return err
	}
	var sold, soldOut, inside, maxInside atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range instances {
		c := newClient()
		defer c.Close()
		for range buyers {
			wg.Go(func() {
				err := c.Do(ctx, "product:1", 5*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
					if n := inside.Add(1); n > maxInside.Load() {
						maxInside.Store(n)
					}
					defer inside.Add(-1)
					left, err := rdb.Get(ctx, stockKey).Int()
					if err != nil {
						return err
					}
					if left == 0 {
						soldOut.Add(1)
						return nil
					}
					time.Sleep(time.Millisecond) // the read-check-write window the lock protects
					sold.Add(1)
					return rdb.Set(ctx, stockKey, left-1, 0).Err()
				})
				if err != nil {
					log.Printf("buyer: %v", err)
				}
			})
		}
	}
	wg.Wait()
	left, _ := rdb.Get(ctx, stockKey).Int()
	fmt.Printf("1. stock: %d buyers on %d instances, stock %d -> sold %d, sold out for %d, left %d, at most %d inside at once (%v)\n",
		instances*buyers, instances, stock, sold.Load(), soldOut.Load(), left, maxInside.Load(), time.Since(start).Round(time.Millisecond))
	if sold.Load() != stock || left != 0 || maxInside.Load() != 1 {
		return fmt.Errorf("quickstart: %w: the lock did not hold", errCheck)
	}
	return nil
}

// wakeOnRelease: a waiter gets a 30-second lock moments after its release.
func wakeOnRelease(ctx context.Context, newClient func() *fencelock.Client) error {
	holder, waiter := newClient(), newClient()
	defer holder.Close()
	defer waiter.Close()
	lk, err := holder.TryAcquire(ctx, "report", 30*time.Second)
	if err != nil {
		return err
	}
	releasedAt := make(chan time.Time, 1)
	time.AfterFunc(200*time.Millisecond, func() {
		releasedAt <- time.Now()
		lk.Release(ctx)
	})
	next, err := waiter.Acquire(ctx, "report", 30*time.Second, fencelock.WithWait(5*time.Second))
	if err != nil {
		return err
	}
	defer next.Release(ctx)
	fmt.Printf("2. wake-up: the waiter got the lock %v after the release (holder's lease: 30s); fence %d -> %d\n",
		time.Since(<-releasedAt).Round(10*time.Microsecond), lk.Fence(), next.Fence())
	return nil
}

// fencing: a holder stalls past its lease; the next holder writes; the
// stalled holder's late write is refused because its fence is older.
func fencing(ctx context.Context, newClient func() *fencelock.Client) error {
	c := newClient()
	defer c.Close()
	store := &fencedValue{}

	stalled, err := c.TryAcquire(ctx, "account", 200*time.Millisecond)
	if err != nil {
		return err
	}
	<-stalled.Done() // stands for a GC pause or a frozen VM longer than the lease
	next, err := c.Acquire(ctx, "account", time.Second)
	if err != nil {
		return err
	}
	store.write("written by the next holder", next.Fence())
	next.Release(ctx)
	lateErr := store.write("late write by the stalled holder", stalled.Fence())
	fmt.Printf("3. fencing: stalled holder told %q; its late write: %v; value kept: %q\n",
		stalled.Err(), lateErr, store.value)
	if lateErr == nil {
		return fmt.Errorf("quickstart: %w: a stale write was accepted", errCheck)
	}
	return nil
}

// fencedValue accepts a write only with a fence at least as new as the last
// one it accepted. (The check must be atomic with the write; here a mutex.)
type fencedValue struct {
	mu    sync.Mutex
	value string
	fence int64
}

func (v *fencedValue) write(value string, fence int64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if fence < v.fence {
		return fmt.Errorf("refused: fence %d is older than %d", fence, v.fence)
	}
	v.value, v.fence = value, fence
	return nil
}

// connect uses REDIS_URL, or starts a private redis-server.
func connect() (*redis.Client, func(), error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("quickstart: REDIS_URL: %w", err)
		}
		opt.ContextTimeoutEnabled = true // requests end at their deadline; see redisbackend
		rdb := redis.NewClient(opt)
		return rdb, func() { rdb.Close() }, nil
	}
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("quickstart: %w (or set REDIS_URL)", err)
	}
	fmt.Printf("started a private redis-server on %s\n", srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() { rdb.Close(); srv.Close() }, nil
}

// cleanUp removes the keys this run made, when it used a shared Redis.
func cleanUp(ctx context.Context, rdb *redis.Client, ns string) {
	iter := rdb.Scan(ctx, 0, ns+":*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}
