package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// SCRIPT FLUSH (as after a restart or failover) costs a round trip, never
// a failure: of acquires, TTLs, Refreshes, renewals and releases.
func TestScriptFlushMidRun(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 2*time.Minute)
	// A lease long enough that a loaded machine cannot make it lapse, with
	// a short renewal interval so that renewals run while fn holds the lock.
	const ttl, interval = 2 * time.Second, 200 * time.Millisecond
	stop := make(chan struct{})
	var flushes atomic.Int64
	var flusher, wg sync.WaitGroup
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond): // the storm's pace
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Error(err)
				}
				flushes.Add(1)
			}
		}
	})
	var renewedInFn atomic.Int64
	for i := range 4 {
		wg.Go(func() {
			for round := range 100 {
				err := c.Do(ctx, "flush", ttl, func(ctx context.Context, lk *fencelock.Lock) error {
					if _, err := lk.TTL(ctx); err != nil {
						return err
					}
					if i == 0 && round%10 == 0 {
						// Hold the lock until a renewal has gone through.
						acquiredDeadline := lk.Deadline()
						tick := time.NewTicker(5 * time.Millisecond)
						defer tick.Stop()
						for !lk.Deadline().After(acquiredDeadline) {
							select {
							case <-ctx.Done():
								return context.Cause(ctx)
							case <-tick.C:
							}
						}
						renewedInFn.Add(1)
					}
					return lk.Refresh(ctx, ttl)
				}, fencelock.WithAutoRenew(interval))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	flusher.Wait()
	if flushes.Load() == 0 {
		t.Fatal("no SCRIPT FLUSH happened")
	}
	if n := renewedInFn.Load(); n != 10 {
		t.Fatalf("%d of 10 holds saw a renewal", n)
	}
	t.Logf("%d flushes", flushes.Load())
}

// With the server gone, calls fail with errors within their contexts; no
// panic, no hang.
func TestServerDown(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	held, err := c.TryAcquire(ctx, "down", 5*time.Second, fencelock.WithAutoRenew(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	short := func() context.Context { return ctxTimeout(t, 300*time.Millisecond) }
	start := time.Now()
	// Each call ends with its context (or at once): no hang.
	if _, err := c.TryAcquire(short(), "down", time.Second); !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with the server down: %v, want ErrUnavailable, not ErrNotAcquired", err)
	}
	// (Another key: a wait for "down" would wait for this Client's own
	// hold, which is still held locally, without asking the server.)
	if _, err := c.Acquire(short(), "down-other", time.Second); !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("Acquire with the server down: %v, want ErrUnavailable and DeadlineExceeded, not ErrNotAcquired", err)
	}
	var heldHere *fencelock.NotAcquiredError
	if _, err := c.Acquire(short(), "down", time.Second); !errors.As(err, &heldHere) || !heldHere.HeldHere || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of the key this Client holds, with the server down: %v, want ErrNotAcquired with HeldHere and DeadlineExceeded", err)
	}
	if err := c.Do(short(), "down", time.Second, func(context.Context, *fencelock.Lock) error { return nil }); err == nil {
		t.Fatal("Do with the server down succeeded")
	}
	if _, err := held.TTL(short()); err == nil {
		t.Fatal("TTL with the server down succeeded")
	}
	if err := held.Refresh(short(), 5*time.Second); err == nil {
		t.Fatal("Refresh with the server down succeeded")
	}
	if err := held.Release(short()); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Release with the server down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("six calls with 300ms contexts took %v", d)
	}
}

// A paused server does not hold a caller past its context, even though
// go-redis waits for its read timeout (a minute here: the distinction
// between the two must not depend on how loaded the machine is).
func TestPausedServerRespectsContext(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { rdb.Close() })
	c := fencelock.New(redisbackend.New(rdb))
	t.Cleanup(func() { srv.Resume(); c.Close() })
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := c.TryAcquire(ctx, "warm", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	for _, call := range []struct {
		name string
		f    func(context.Context) error
	}{
		{"TryAcquire", func(ctx context.Context) error { _, err := c.TryAcquire(ctx, "p", time.Second); return err }},
		{"Acquire", func(ctx context.Context) error { _, err := c.Acquire(ctx, "p", time.Second); return err }},
	} {
		start := time.Now()
		err := call.f(ctxTimeout(t, 200*time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want DeadlineExceeded", call.name, err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%s returned %v after a 200ms deadline: it waited for go-redis's read timeout", call.name, d)
		}
	}
}

// Every invalid argument gives an error that names it; none reaches Redis.
func TestInvalidArguments(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)
	ok := func(context.Context, *fencelock.Lock) error { return nil }
	cases := []struct {
		name, want string
		call       func() error
	}{
		{"empty key", `key ""`, func() error { _, err := c.TryAcquire(ctx, "", time.Second); return err }},
		{"zero ttl", "ttl 0s", func() error { _, err := c.Acquire(ctx, "k", 0); return err }},
		{"negative ttl", "ttl -1s", func() error { _, err := c.TryAcquire(ctx, "k", -time.Second); return err }},
		{"sub-millisecond ttl", "ttl 500µs", func() error { _, err := c.TryAcquire(ctx, "k", 500*time.Microsecond); return err }},
		{"zero renew interval", "interval 0s", func() error {
			_, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(0))
			return err
		}},
		{"negative renew interval", "interval -1ms", func() error {
			_, err := c.Acquire(ctx, "k", time.Second, fencelock.WithAutoRenew(-time.Millisecond))
			return err
		}},
		{"renew interval not below ttl", "interval 1s", func() error {
			return c.Do(ctx, "k", time.Second, ok, fencelock.WithAutoRenew(time.Second))
		}},
		{"negative wait", "WithWait duration -1s", func() error {
			_, err := c.Acquire(ctx, "k", time.Second, fencelock.WithWait(-time.Second))
			return err
		}},
		{"nil retry", "WithRetry strategy", func() error {
			_, err := c.Acquire(ctx, "k", time.Second, fencelock.WithRetry(nil))
			return err
		}},
		{"bad backoff", "ExponentialBackoff.Min 0s", func() error {
			_, err := c.Acquire(ctx, "k", time.Second, fencelock.WithRetry(fencelock.ExponentialBackoff{Max: time.Second}))
			return err
		}},
		{"bad backoff max", "ExponentialBackoff.Max 1ms", func() error {
			_, err := c.Acquire(ctx, "k", time.Second, fencelock.WithRetry(fencelock.ExponentialBackoff{Min: time.Second, Max: time.Millisecond}))
			return err
		}},
		{"empty owner", `owner ""`, func() error {
			_, err := c.TryAcquire(fencelock.WithOwner(ctx, ""), "k", time.Second)
			return err
		}},
		{"nil fn", "fn nil", func() error { return c.Do(ctx, "k", time.Second, nil) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, fencelock.ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
			if !contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
	if n := rdb.Exists(ctx, "lock:{k}:lock", "lock:{k}:fence").Val(); n != 0 {
		t.Fatal("an invalid call reached Redis")
	}

	lk, err := c.TryAcquire(ctx, "valid", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 200 * time.Millisecond} {
		if err := lk.Refresh(ctx, ttl); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Refresh(%v): %v, want ErrInvalidArgument", ttl, err)
		}
	}
	if !lk.Held() {
		t.Fatal("an invalid Refresh hurt the lock")
	}

	bad := newClient(t, rdb, fencelock.WithTokenGenerator(func() (string, error) { return "", nil }))
	if _, err := bad.TryAcquire(ctx, "k", time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("empty generated token: %v", err)
	}
	failing := newClient(t, rdb, fencelock.WithTokenGenerator(func() (string, error) { return "", errors.New("no entropy") }))
	if _, err := failing.TryAcquire(ctx, "k", time.Second); err == nil || !contains(err.Error(), "no entropy") {
		t.Fatalf("failing token generator: %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
