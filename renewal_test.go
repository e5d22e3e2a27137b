package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

func TestAutoRenewKeepsLockHeld(t *testing.T) {
	_, rdb := startRedis(t)
	c, other := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)
	lk, err := c.TryAcquire(ctx, "renew", 300*time.Millisecond, fencelock.WithAutoRenew(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		if !lk.Held() {
			t.Fatalf("lock not held after %v: %v", time.Until(end), lk.Err())
		}
		if _, err := other.TryAcquire(ctx, "renew", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("another client could take a renewed lock: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pttl := rdb.PTTL(ctx, "lock:{renew}:lock").Val(); pttl <= 0 || pttl > 300*time.Millisecond {
		t.Fatalf("server PTTL %v after 2s of renewal, want within the 300ms lease", pttl)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lk.Err(), fencelock.ErrReleased) || errors.Is(lk.Err(), fencelock.ErrLost) {
		t.Fatalf("after Release, Err = %v, want ErrReleased only", lk.Err())
	}
}

// Loss is signalled within one renewal interval when the key is deleted, and
// when another holder has taken it over.
func TestLossSignalledWhenKeyRemoved(t *testing.T) {
	const ttl, interval = 3 * time.Second, time.Second
	for _, tc := range []struct {
		name   string
		remove func(ctx context.Context, t *testing.T, clients []*fencelock.Client)
	}{
		{"deleted", func(ctx context.Context, t *testing.T, _ []*fencelock.Client) {}},
		{"taken over", func(ctx context.Context, t *testing.T, clients []*fencelock.Client) {
			if _, err := clients[1].TryAcquire(ctx, "lost", time.Minute); err != nil {
				t.Errorf("successor: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb := startRedis(t)
			c, successor := newClient(t, rdb), newClient(t, rdb)
			ctx := ctxTimeout(t, 20*time.Second)
			var (
				lostAfter time.Duration
				cause     error
			)
			err := c.Do(ctx, "lost", ttl, func(ctx context.Context, lk *fencelock.Lock) error {
				removed := time.Now()
				rdb.Del(ctx, "lock:{lost}:lock")
				tc.remove(ctx, t, []*fencelock.Client{c, successor})
				select {
				case <-ctx.Done():
					lostAfter, cause = time.Since(removed), context.Cause(ctx)
				case <-time.After(2 * ttl):
					t.Error("fn's context was not cancelled after the lock was removed")
				}
				if !errors.Is(lk.Err(), fencelock.ErrLost) {
					t.Errorf("lk.Err() = %v, want ErrLost", lk.Err())
				}
				select {
				case <-lk.Done():
				default:
					t.Error("Done not closed on loss")
				}
				return nil
			})
			if !errors.Is(err, fencelock.ErrLost) {
				t.Fatalf("Do returned %v, want an error matching ErrLost", err)
			}
			if !errors.Is(cause, fencelock.ErrLost) {
				t.Fatalf("fn's context cause %v, want ErrLost", cause)
			}
			if lostAfter > interval+300*time.Millisecond {
				t.Fatalf("loss signalled %v after the key was removed, want within one renewal interval (%v)", lostAfter, interval)
			}
			if tc.name == "taken over" {
				if n := rdb.Exists(ctx, "lock:{lost}:lock").Val(); n != 1 {
					t.Fatal("the stale holder's release removed the successor's lock")
				}
			}
		})
	}
}

// A paused server (or a partition) makes renewals fail; the holder learns of
// the loss when its local lease deadline passes, before the server-side
// lease can have ended.
func TestLossSignalledWhenServerPaused(t *testing.T) {
	srv, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)
	const ttl = 500 * time.Millisecond
	lk, err := c.TryAcquire(ctx, "paused", ttl, fencelock.WithAutoRenew(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lkCtx, cancel := lk.Context(ctx)
	defer cancel()
	time.Sleep(200 * time.Millisecond) // at least one renewal
	paused := time.Now()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	lostAfter := waitDone(t, lk.Done(), 3*ttl, "loss signal while the server is paused")
	if lostAfter > ttl+100*time.Millisecond {
		t.Fatalf("loss signalled %v after the pause began, want within the %v lease", lostAfter, ttl)
	}
	if !errors.Is(lk.Err(), fencelock.ErrLost) || lk.Held() {
		t.Fatalf("Err %v Held %v, want ErrLost", lk.Err(), lk.Held())
	}
	if !errors.Is(context.Cause(lkCtx), fencelock.ErrLost) {
		t.Fatalf("lock context cause %v, want ErrLost", context.Cause(lkCtx))
	}
	time.Sleep(time.Until(paused.Add(2 * ttl)))
	srv.Resume()
	// The renewal that hung during the pause must not revive the lock.
	time.Sleep(100 * time.Millisecond)
	if lk.Held() || !errors.Is(lk.Err(), fencelock.ErrLost) {
		t.Fatal("the lock came back after the server resumed")
	}
}

func TestNormalReleaseDoesNotSignalLoss(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)
	var held *fencelock.Lock
	var fnCtx context.Context
	err := c.Do(ctx, "fine", 300*time.Millisecond, func(ctx context.Context, lk *fencelock.Lock) error {
		held, fnCtx = lk, ctx
		time.Sleep(500 * time.Millisecond) // longer than the lease: renewal carries it
		return ctx.Err()
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if errors.Is(context.Cause(fnCtx), fencelock.ErrLost) {
		t.Fatal("fn's context was cancelled with ErrLost after a normal release")
	}
	if !errors.Is(held.Err(), fencelock.ErrReleased) || errors.Is(held.Err(), fencelock.ErrLost) {
		t.Fatalf("Err after Do = %v, want ErrReleased", held.Err())
	}
}

// Renewals of many locks share round trips.
func TestRenewalsAreBatched(t *testing.T) {
	_, rdb := startRedis(t)
	hook := &batchHook{}
	rdb.AddHook(hook)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)
	const locks = 50
	for i := range locks {
		if _, err := c.TryAcquire(ctx, "batch-"+string(rune('A'+i)), time.Second, fencelock.WithAutoRenew(300*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	hook.reset()
	time.Sleep(1500 * time.Millisecond)
	pipelines, cmds := hook.reset()
	if cmds < locks*3 {
		t.Fatalf("%d renewals of %d locks in 1.5s, want at least %d", cmds, locks, locks*3)
	}
	if pipelines*10 > cmds {
		t.Fatalf("%d renewals took %d round trips: not batched", cmds, pipelines)
	}
	t.Logf("%d renewals in %d round trips", cmds, pipelines)
}

// A panic in Do's function releases the lock and goes on up.
func TestDoReleasesOnPanic(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic to go on", r)
			}
		}()
		c.Do(ctx, "panics", time.Minute, func(context.Context, *fencelock.Lock) error { panic("boom") })
	}()
	if n := rdb.Exists(ctx, "lock:{panics}:lock").Val(); n != 0 {
		t.Fatal("the lock stayed after a panic in Do")
	}
}
