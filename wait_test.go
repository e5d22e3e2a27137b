package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
)

// noFallback is a retry strategy whose fallback timer is far longer than
// any bound these tests wait: a waiter that gets the lock in time was woken
// by a release (or found the lease ended), never by its timer.
var noFallback = fencelock.WithRetry(fencelock.ConstantBackoff{Delay: 5 * time.Minute})

// A release wakes a waiter at once, although the holder's lease is long.
// (How fast exactly is a timing property: timing_test.go, on the memory
// backend.)
func TestWaiterWokenOnRelease(t *testing.T) {
	srv, rdb := startRedis(t)
	holder := newClient(t, rdb)
	attempts := &servertest.AcquireAttempts{}
	waitRdb := newRedisClient(t, srv.Addr())
	waitRdb.AddHook(attempts)
	waiter := newClient(t, waitRdb)
	ctx := ctxTimeout(t, 60*time.Second)
	lk, err := holder.TryAcquire(ctx, "wake", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *fencelock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "wake", 30*time.Second, noFallback)
		got <- result{l, err}
	}()
	// The waiter tries, finds the lock held, subscribes and tries once more
	// before it sleeps: after two answered attempts only a wake-up makes it
	// try again.
	waitUntil(t, 20*time.Second, "two acquire attempts by the waiter", func() bool { return attempts.Load() >= 2 })
	select {
	case r := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", r.err)
	default:
	}
	released := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("the waiter had the lock %v after the release began", time.Since(released))
		if r.lk.Fence() <= lk.Fence() {
			t.Fatalf("waiter's fence %d not above %d", r.lk.Fence(), lk.Fence())
		}
		r.lk.Release(ctx)
	case <-time.After(15 * time.Second): // far below the 30s lease and the fallback timer
		t.Fatal("waiter not woken by the release")
	}
}

// A lease that ends without a release (a crashed holder) is noticed through
// the holder's remaining TTL, not after a long backoff, also when an attempt
// lands in the lease's last millisecond. The crashed holder takes the lock
// through the backend directly: a Client would release a lapsed lock in the
// background, and the release message would wake the waiter.
func TestWaiterTakesExpiredLease(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	crashed := redisbackend.New(rdb)
	t.Cleanup(func() { crashed.Close() })
	waiter := newClient(t, rdb)
	ctx := ctxTimeout(t, 2*time.Minute)
	const ttl = 300 * time.Millisecond
	for i := range 8 {
		key := fmt.Sprintf("crash-%d", i)
		res, err := crashed.Acquire(ctx, driver.Request{
			Ref:   driver.Ref{Namespace: fencelock.DefaultNamespace, Key: key, Token: fmt.Sprintf("crashed-%d", i)},
			Owner: "crashed",
			TTL:   ttl,
		})
		if err != nil || !res.Acquired {
			t.Fatalf("round %d: the crashed holder's acquire: %+v %v", i, res, err)
		}
		// The fallback timer is minutes: only the holder's remaining TTL
		// can wake the waiter within the bound below.
		start := time.Now()
		lk, err := waiter.Acquire(ctx, key, time.Second, noFallback, fencelock.WithWait(20*time.Second))
		if err != nil {
			t.Fatalf("round %d: %v (the waiter did not notice the lease end)", i, err)
		}
		t.Logf("round %d: took the expired lock after %v (lease %v)", i, time.Since(start), ttl)
		if lk.Fence() <= res.Fence {
			t.Fatalf("round %d: fence %d not above the crashed holder's %d", i, lk.Fence(), res.Fence)
		}
		lk.Release(ctx)
	}
}

func TestWaitEnds(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	holder := newClient(t, rdb)
	attempts := &servertest.AcquireAttempts{}
	waitRdb := newRedisClient(t, srv.Addr())
	waitRdb.AddHook(attempts)
	waiter := newClient(t, waitRdb)
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := holder.TryAcquire(ctx, "busy", 30*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("context cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		before := attempts.Load()
		errc := make(chan error, 1)
		go func() {
			_, err := waiter.Acquire(ctx, "busy", time.Second, noFallback)
			errc <- err
		}()
		// Cancel once the waiter is asleep (two answered attempts).
		waitUntil(t, 20*time.Second, "two acquire attempts", func() bool { return attempts.Load() >= before+2 })
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, fencelock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want ErrNotAcquired and context.Canceled", err)
			}
		case <-time.After(15 * time.Second): // far below the fallback timer and the 30s lease
			t.Fatal("the wait did not end with its context")
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		// Long enough for the first attempt to be answered: a deadline
		// that cuts the only attempt short is an outage, not contention.
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := waiter.Acquire(ctx, "busy", time.Second)
		if !errors.Is(err, fencelock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
	})
	t.Run("WithWait", func(t *testing.T) {
		const wait = time.Second
		start := time.Now()
		_, err := waiter.Acquire(ctx, "busy", time.Second, fencelock.WithWait(wait))
		if !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("got %v, want ErrNotAcquired", err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Fatalf("got %v: the caller's context did not end", err)
		}
		// Not before the wait is over; long before the holder's 30s lease.
		if d := time.Since(start); d < wait || d > 15*time.Second {
			t.Fatalf("WithWait(%v) waited %v (holder's lease is 30s)", wait, d)
		}
		var na *fencelock.NotAcquiredError
		if !errors.As(err, &na) || na.Attempts < 2 {
			t.Fatalf("want a NotAcquiredError with several attempts, got %#v", err)
		}
	})
	t.Run("WithWait(0) takes a free lock", func(t *testing.T) {
		lk, err := waiter.Acquire(ctx, "free", time.Second, fencelock.WithWait(0))
		if err != nil {
			t.Fatalf("WithWait(0) on a free key: %v", err)
		}
		lk.Release(ctx)
		ran := false
		err = waiter.Do(ctx, "free", time.Second, func(context.Context, *fencelock.Lock) error { ran = true; return nil }, fencelock.WithWait(0))
		if err != nil || !ran {
			t.Fatalf("Do with WithWait(0) on a free key: %v", err)
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
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := holder.TryAcquire(ctx, "busy", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	mine, err := c.TryAcquire(ctx, "mine", 30*time.Second, fencelock.WithAutoRenew(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Go(func() {
			_, err := c.Acquire(ctx, "busy", time.Second)
			errs <- err
		})
	}
	// Close once every waiter is waiting: the first asleep between attempts,
	// the others in the Client's line behind it.
	waitUntil(t, 20*time.Second, "five waiting Acquire calls", func() bool {
		return goroutinesIn(waiterSleep) == 1 && goroutinesIn(waiterInLine) == waiters-1
	})
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	// Close ends the waits instead of waiting for the holder's 30s lease.
	if d := time.Since(start); d > 15*time.Second {
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
	ctx := ctxTimeout(t, 60*time.Second)
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
			l.Release(ctx)
		})
		// They ask in order 0..n-1: the next one starts once this one has
		// its place (the first one asleep between attempts, the others in
		// line behind it).
		waitUntil(t, 20*time.Second, fmt.Sprintf("waiter %d in line", i), func() bool {
			return goroutinesIn(waiterSleep) == 1 && goroutinesIn(waiterInLine) == i
		})
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
	if !errors.Is(err, context.Canceled) || errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("Acquire: %v, want context.Canceled alone: the caller's, not contention", err)
	}
	// A clean-up would run in the background; Close waits for background
	// releases, so after it every command the calls caused has been sent.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := hook.reset(); n != 0 {
		t.Fatalf("%d commands sent for calls whose context was already done", n)
	}
}

// waitUntil polls cond until it holds, failing the test after limit. The
// limit only bounds a hang: make it generous (the machine may be loaded).
func waitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		<-tick.C
	}
}

// Frames of a waiting Acquire, as goroutine stacks show them: asleep between
// attempts (the head of the Client's line for the key), and waiting for its
// turn in that line.
const (
	waiterSleep  = "fencelock.(*waiter).sleep("
	waiterInLine = "fencelock.(*waiter).awaitTurn("
)

// goroutinesIn returns how many goroutines have the function frame in their
// stacks. Tests use it to learn that Acquire calls are waiting where nothing
// outside the process shows it (a goroutine in its Client's line sends
// nothing). The root package's tests do not run in parallel, so the count
// is the calling test's.
func goroutinesIn(frame string) int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, frame) {
			count++
		}
	}
	return count
}
