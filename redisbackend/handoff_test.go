package redisbackend_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// Real-server tests of hand-offs (driver.Lines.HandOff): a release by a
// goroutine of a Client hands the lock to the Client's next waiter in the
// same script run (instead of a release, a wake-up and an acquire). The
// deterministic tests are in the root package's handoff_test.go.

// The hand-off is one script run: the waiter makes no acquire of its own,
// neither while the Client holds the lock nor after the release.
func TestHandOffCommands(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	waiting := make(chan struct{}, 1) // the waiter lined up
	c := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(fencelock.Hooks{
		WaitStart: func(context.Context, fencelock.WaitEvent) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		},
	}))
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	// Load the scripts (EVAL) before counting.
	if err := c.Do(ctx, "warm", time.Minute, func(context.Context, *fencelock.Lock) error { return nil }); err != nil {
		t.Fatal(err)
	}
	holder, err := c.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got := make(chan *fencelock.Lock, 1)
	go func() {
		lk, err := c.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	select {
	case <-waiting: // lined up; it has nothing to attempt
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not begin to wait within 30s")
	}
	if calls := commandCalls(t, rdb); calls["evalsha"] != 0 {
		t.Fatalf("commands while the Client held the lock: %s; want no script run (the waiter waits for its Client's release)", fmtCalls(calls))
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var lk *fencelock.Lock
	select {
	case lk = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not get the lock within 30s of the release")
	}
	if lk == nil {
		t.FailNow()
	}
	calls := commandCalls(t, rdb)
	if calls["evalsha"] != 1 || calls["publish"] != 0 {
		t.Fatalf("commands of the hand-off: %s; want one script run (the release that took the lock for the waiter), no publish", fmtCalls(calls))
	}
	if lk.Fence() <= holder.Fence() {
		t.Fatalf("handed fence %d, want above the holder's %d", lk.Fence(), holder.Fence())
	}
	if ttl, err := lk.TTL(ctx); err != nil || ttl < 30*time.Second {
		t.Fatalf("the handed lock's server-side lease: %v %v, want about a minute", ttl, err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, "fencelock:{k}:lock").Result(); err != nil || n != 0 {
		t.Fatalf("lock key after the last release: exists=%d %v, want deleted", n, err)
	}
}

// Goroutines of one Client that keep handing the lock to each other do not
// keep it from another process: its refused attempt makes the next release
// free the lock and wake it instead. Without that rule the other process
// would wait until the Client's goroutines stopped.
func TestHandOffDoesNotStarveOtherProcess(t *testing.T) {
	srv := servertest.Redis(t)
	newClient := func() *fencelock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		c := fencelock.New(redisbackend.New(rdb))
		t.Cleanup(func() { c.Close(); rdb.Close() })
		return c
	}
	busy, other := newClient(), newClient()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stop := make(chan struct{})
	var cycles atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				lk, err := busy.Acquire(ctx, "k", 10*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				cycles.Add(1)
				time.Sleep(2 * time.Millisecond)
				lk.Release(ctx)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	// The busy Client's goroutines hand the lock around.
	pollUntil(t, 30*time.Second, "20 cycles of the busy Client", func() bool { return cycles.Load() >= 20 })
	before := cycles.Load()
	lk, err := other.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatalf("the other process's Acquire while the busy Client's goroutines take turns: %v (after %d of their cycles)", err, cycles.Load()-before)
	}
	t.Logf("the other process got the lock after %d of the busy Client's cycles", cycles.Load()-before)
	lk.Release(ctx)
}

// A re-entrant waiter (WithOwner) of the Client that holds the lock cannot
// be served by a hand-off (its hold must carry its owner): the release
// succeeds, frees the lock and wakes it, and it takes the lock as its owner
// at once, not when the holder's lease would have ended.
func TestHandOffReentrantWaiter(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	waiting := make(chan struct{}, 1)
	c := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(fencelock.Hooks{
		WaitStart: func(context.Context, fencelock.WaitEvent) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		},
	}))
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	const lease = time.Minute
	holder, err := c.Acquire(ctx, "k", lease)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fencelock.Lock, 1)
	go func() {
		lk, err := c.Acquire(fencelock.WithOwner(ctx, "job-7"), "k", lease, fencelock.WithWait(40*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the re-entrant waiter did not begin to wait within 30s")
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("Release with a re-entrant waiter of the same Client: %v", err)
	}
	var lk *fencelock.Lock
	select {
	case lk = <-got:
	case <-time.After(20 * time.Second): // a third of the holder's lease: the release woke it
		t.Fatal("the re-entrant waiter did not get the lock within 20s of the release")
	}
	if lk == nil {
		t.FailNow()
	}
	info, err := c.Inspect(ctx, "k")
	if err != nil || info.Owner != "job-7" || info.Fence != lk.Fence() {
		t.Fatalf("Inspect after the release: %+v %v, want held by job-7 with fence %d", info, err, lk.Fence())
	}
	again, err := c.TryAcquire(fencelock.WithOwner(ctx, "job-7"), "k", lease)
	if err != nil || again.Holds() != 2 {
		t.Fatalf("re-entry by job-7: %v holds %d, want 2 holds", err, again.Holds())
	}
	again.Release(ctx)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
