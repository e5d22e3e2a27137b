package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// A release wakes a waiter at once, although the holder's lease is long.
func TestWaiterWokenOnRelease(t *testing.T) {
	_, rdb := startRedis(t)
	holder, waiter := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)
	lk, err := holder.TryAcquire(ctx, "wake", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *fencelock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "wake", 30*time.Second)
		got <- result{l, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is subscribed and asleep
	released := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if d := r.at.Sub(released); d > 100*time.Millisecond {
			t.Fatalf("waiter woke %v after the release, want within 100ms", d)
		}
		if r.lk.Fence() <= lk.Fence() {
			t.Fatalf("waiter's fence %d not above %d", r.lk.Fence(), lk.Fence())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
}

// A lease that ends without a release (a crashed holder) is noticed through
// the holder's remaining TTL, not after a long backoff, also when an attempt
// lands in the lease's last millisecond.
func TestWaiterTakesExpiredLease(t *testing.T) {
	_, rdb := startRedis(t)
	holder, waiter := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 200 * time.Millisecond
	for i := range 8 {
		key := fmt.Sprintf("crash-%d", i)
		acquired := time.Now()
		if _, err := holder.TryAcquire(ctx, key, ttl); err != nil {
			t.Fatal(err)
		}
		lk, err := waiter.Acquire(ctx, key, time.Second, fencelock.WithRetry(fencelock.ConstantBackoff{Delay: 10 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(acquired); d > ttl+100*time.Millisecond {
			t.Fatalf("round %d: took the expired lock after %v, want soon after the %v lease", i, d, ttl)
		}
		lk.Release(ctx)
	}
}

func TestWaitEnds(t *testing.T) {
	_, rdb := startRedis(t)
	holder, waiter := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)
	if _, err := holder.TryAcquire(ctx, "busy", 30*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("context cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := waiter.Acquire(ctx, "busy", time.Second)
		if !errors.Is(err, fencelock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrNotAcquired and context.Canceled", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("returned %v after the cancel", d)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		_, err := waiter.Acquire(ctx, "busy", time.Second)
		if !errors.Is(err, fencelock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
	})
	t.Run("WithWait", func(t *testing.T) {
		start := time.Now()
		_, err := waiter.Acquire(ctx, "busy", time.Second, fencelock.WithWait(200*time.Millisecond))
		if !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("got %v, want ErrNotAcquired", err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Fatalf("got %v: the caller's context did not end", err)
		}
		if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
			t.Fatalf("WithWait(200ms) waited %v (holder's lease is 30s)", d)
		}
		var na *fencelock.NotAcquiredError
		if !errors.As(err, &na) || na.Attempts < 2 {
			t.Fatalf("want a NotAcquiredError with several attempts, got %#v", err)
		}
	})
	t.Run("WithWait(0) takes a free lock", func(t *testing.T) {
		for _, wait := range []time.Duration{0} {
			lk, err := waiter.Acquire(ctx, "free", time.Second, fencelock.WithWait(wait))
			if err != nil {
				t.Fatalf("WithWait(%v) on a free key: %v", wait, err)
			}
			lk.Release(ctx)
			ran := false
			err = waiter.Do(ctx, "free", time.Second, func(context.Context, *fencelock.Lock) error { ran = true; return nil }, fencelock.WithWait(wait))
			if err != nil || !ran {
				t.Fatalf("Do with WithWait(%v) on a free key: %v", wait, err)
			}
		}
	})
	t.Run("WithWait(0) is one attempt", func(t *testing.T) {
		_, err := waiter.Acquire(ctx, "busy", time.Second, fencelock.WithWait(0))
		var na *fencelock.NotAcquiredError
		if !errors.As(err, &na) || na.Attempts != 1 {
			t.Fatalf("got %v, want one attempt", err)
		}
	})
}

func TestCloseEndsWaitsAndReleases(t *testing.T) {
	_, rdb := startRedis(t)
	holder := newClient(t, rdb)
	c := fencelock.New(redisbackend.New(rdb))
	ctx := ctxTimeout(t, 20*time.Second)
	if _, err := holder.TryAcquire(ctx, "busy", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	mine, err := c.TryAcquire(ctx, "mine", 30*time.Second, fencelock.WithAutoRenew(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			_, err := c.Acquire(ctx, "busy", time.Second)
			errs <- err
		})
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v", d)
	}
	for err := range errs {
		if !errors.Is(err, fencelock.ErrClosed) || !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Errorf("waiter ended with %v, want ErrClosed and ErrNotAcquired", err)
		}
	}
	if !errors.Is(mine.Err(), fencelock.ErrReleased) || !errors.Is(mine.Err(), fencelock.ErrClosed) {
		t.Fatalf("held lock after Close: %v, want ErrReleased and ErrClosed", mine.Err())
	}
	if n := rdb.Exists(ctx, "lock:{mine}:lock").Val(); n != 0 {
		t.Fatal("Close left the held lock on the server")
	}
	if _, err := c.TryAcquire(ctx, "other", time.Second); !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Goroutines of one Client waiting for a key get it in the order they
// asked, and a release makes one attempt per Client, not per goroutine.
func TestWaitersOfOneClientQueue(t *testing.T) {
	_, rdb := startRedis(t)
	holder := newClient(t, rdb)
	hook := &countingHook{}
	waitRdb := newRedisClient(t, rdb.Options().Addr)
	waitRdb.AddHook(hook)
	c := newClient(t, waitRdb)
	ctx := ctxTimeout(t, 20*time.Second)
	lk, err := holder.TryAcquire(ctx, "line", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, err := c.Acquire(ctx, "line", 30*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			time.Sleep(20 * time.Millisecond)
			l.Release(ctx)
		})
		time.Sleep(50 * time.Millisecond) // they ask in order 0..n-1
	}
	hook.reset()
	lk.Release(ctx)
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d got the lock in turn %d", got, want)
		}
		want++
	}
	// Per hand-off: the winner's attempt and release, the next head's
	// attempt(s); far fewer than one attempt per waiting goroutine.
	if calls := hook.reset(); calls > 4*n {
		t.Fatalf("%d commands for %d hand-offs: waiters are stampeding", calls, n)
	}
}

// A context already done makes no attempt and leaves nothing to clean up.
func TestContextAlreadyDone(t *testing.T) {
	_, rdb := startRedis(t)
	hook := &countingHook{}
	rdb.AddHook(hook)
	c := newClient(t, rdb)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	hook.reset()
	if _, err := c.TryAcquire(ctx, "done", time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire: %v, want context.Canceled", err)
	}
	_, err := c.Acquire(ctx, "done", time.Second)
	var na *fencelock.NotAcquiredError
	if !errors.As(err, &na) || !errors.Is(err, context.Canceled) || na.Attempts != 0 {
		t.Fatalf("Acquire: %v, want ErrNotAcquired and context.Canceled after 0 attempts", err)
	}
	time.Sleep(50 * time.Millisecond) // a clean-up would run in the background
	if n := hook.reset(); n != 0 {
		t.Fatalf("%d commands sent for calls whose context was already done", n)
	}
}
