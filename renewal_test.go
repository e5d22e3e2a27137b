package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Automatic renewal keeps a lock held past its ttl: another client cannot
// take it, and the server's lease is still running after the one granted at
// acquisition has surely ended.
func TestAutoRenewKeepsLockHeld(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	c, other := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	// Each renewal may take up to interval/2; the local lease (ttl less the
	// 10% margin) leaves room for several retries on a loaded machine.
	const ttl, interval = 2 * time.Second, 400 * time.Millisecond
	lk, err := c.TryAcquire(ctx, "renew", ttl, fencelock.WithAutoRenew(interval))
	if err != nil {
		t.Fatal(err)
	}
	// The lease granted at acquisition ends by here (the server counted it
	// from before TryAcquire returned).
	firstLeaseEnd := time.Now().Add(ttl)
	// Check, every 100ms, that the lock stays held until well past that.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(firstLeaseEnd.Add(interval)) {
		if !lk.Held() {
			t.Fatalf("lock not held %v after acquisition: %v", time.Until(firstLeaseEnd)-ttl, lk.Err())
		}
		if _, err := other.TryAcquire(ctx, "renew", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("another client could take a renewed lock: %v", err)
		}
		<-tick.C
	}
	if pttl := rdb.PTTL(ctx, "lock:{renew}:lock").Val(); pttl <= 0 || pttl > ttl {
		t.Fatalf("server PTTL %v after the first lease ended, want a renewed lease within (0, %v]", pttl, ttl)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lk.Err(), fencelock.ErrReleased) || errors.Is(lk.Err(), fencelock.ErrLost) {
		t.Fatalf("after Release, Err = %v, want ErrReleased only", lk.Err())
	}
}

// Loss is signalled by the next renewal when the key is deleted, and when
// another holder has taken it over: long before the local lease deadline.
// (That it comes within one renewal interval is a timing property:
// timing_test.go, on the memory backend.)
func TestLossSignalledWhenKeyRemoved(t *testing.T) {
	t.Parallel()
	const ttl, interval = 30 * time.Second, time.Second
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
			t.Parallel()
			_, rdb := startRedis(t)
			c, successor := newClient(t, rdb), newClient(t, rdb)
			ctx := ctxTimeout(t, 60*time.Second)
			var (
				lostAt, deadline time.Time
				cause            error
			)
			err := c.Do(ctx, "lost", ttl, func(ctx context.Context, lk *fencelock.Lock) error {
				rdb.Del(ctx, "lock:{lost}:lock")
				tc.remove(ctx, t, []*fencelock.Client{c, successor})
				select {
				case <-ctx.Done():
					lostAt, cause = time.Now(), context.Cause(ctx)
				case <-time.After(ttl / 2): // far more than a renewal interval
					t.Error("fn's context was not cancelled after the lock was removed")
				}
				deadline = lk.Deadline()
				if !errors.Is(lk.Err(), fencelock.ErrLost) {
					t.Errorf("lk.Err() = %v, want ErrLost", lk.Err())
				}
				// Contexts are cancelled before Done is closed (so that
				// whoever sees Done finds them cancelled): Done follows.
				select {
				case <-lk.Done():
				case <-time.After(10 * time.Second):
					t.Error("Done not closed on loss")
				}
				return nil
			}, fencelock.WithAutoRenew(interval))
			if !errors.Is(err, fencelock.ErrLost) {
				t.Fatalf("Do returned %v, want an error matching ErrLost", err)
			}
			if !errors.Is(cause, fencelock.ErrLost) {
				t.Fatalf("fn's context cause %v, want ErrLost", cause)
			}
			// A renewal found the lock gone; the local deadline (27s away)
			// had nothing to do with it.
			if !lostAt.Before(deadline) {
				t.Fatalf("loss signalled at %v, not before the local deadline %v: not by a renewal", lostAt, deadline)
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
// lease can have ended. After the server resumes, the lock does not come
// back, and the lost lock is released in the background.
//
// The safety margin is half the ttl, so that the server's lease outlasts the
// loss signal by seconds: the background release then finds the hold still
// there and deletes it (publishing a release message), which tells it apart
// from the lease simply expiring. (The exact moment of the loss signal is a
// timing property: timing_test.go, on the memory backend.)
func TestLossSignalledWhenServerPaused(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	const (
		margin   = 0.5
		ttl      = 10 * time.Second
		interval = time.Second
	)
	c := newClient(t, rdb, fencelock.WithSafetyMargin(margin))
	ctx := ctxTimeout(t, 2*time.Minute)
	sub := rdb.Subscribe(ctx, "lock:{paused}:released")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err := c.TryAcquire(ctx, "paused", ttl, fencelock.WithAutoRenew(interval))
	if err != nil {
		t.Fatal(err)
	}
	lkCtx, cancel := lk.Context(ctx)
	defer cancel()
	acquiredDeadline := lk.Deadline()
	waitUntil(t, 30*time.Second, "a renewal", func() bool { return lk.Deadline().After(acquiredDeadline) })
	// A refused acquire, as a waiter's: the release publishes only then.
	if _, err := newClient(t, rdb).TryAcquire(ctx, "paused", ttl); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Resume() })
	// The server applies nothing from here on: every renewal that succeeded
	// was sent before now.
	paused := time.Now()
	waitDone(t, lk.Done(), 3*ttl, "loss signal while the server is paused")
	lostAt := time.Now()
	if !errors.Is(lk.Err(), fencelock.ErrLost) || lk.Held() {
		t.Fatalf("Err %v Held %v, want ErrLost", lk.Err(), lk.Held())
	}
	if !errors.Is(context.Cause(lkCtx), fencelock.ErrLost) {
		t.Fatalf("lock context cause %v, want ErrLost", context.Cause(lkCtx))
	}
	// The server's lease ends no earlier than the last renewal it applied
	// plus the ttl, and that renewal was sent before the pause: the local
	// deadline, counted from the send time less the margin, is before
	// pause + ttl by at least the margin.
	deadline := lk.Deadline()
	if lease := time.Duration(float64(ttl) * (1 - margin)); deadline.After(paused.Add(lease)) {
		t.Fatalf("local deadline %v after the pause + ttl - margin (%v): it may outlast the server's lease",
			deadline, paused.Add(lease))
	}
	if lostAt.Before(deadline) {
		t.Fatalf("loss signalled at %v, before the local deadline %v, with no renewal able to answer", lostAt, deadline)
	}

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	// The release was queued at the loss; it goes through once the server
	// answers, while the hold is still there.
	msgCtx, cancelMsg := context.WithTimeout(ctx, 30*time.Second)
	defer cancelMsg()
	if msg, err := sub.ReceiveMessage(msgCtx); err != nil {
		t.Fatalf("no release message after the server resumed: %v (the lost lock was not released in the background)", err)
	} else if msg.Channel != "lock:{paused}:released" {
		t.Fatalf("message on %q", msg.Channel)
	}
	// Renewals that hung during the pause reach the server now; none may
	// bring the lock back.
	if n := rdb.Exists(ctx, "lock:{paused}:lock").Val(); n != 0 {
		t.Fatal("the lock key is still there after the background release")
	}
	if lk.Held() || !errors.Is(lk.Err(), fencelock.ErrLost) {
		t.Fatal("the lock came back after the server resumed")
	}
	other := newClient(t, rdb)
	if next, err := other.TryAcquire(ctx, "paused", time.Second); err != nil {
		t.Fatalf("the key is not free after the server resumed: %v", err)
	} else {
		next.Release(ctx)
	}
}

func TestNormalReleaseDoesNotSignalLoss(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	var held *fencelock.Lock
	var fnCtx context.Context
	err := c.Do(ctx, "fine", 2*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
		held, fnCtx = lk, ctx
		// Hold the lock until a renewal has gone through, then release.
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
	ctx := ctxTimeout(t, 60*time.Second)
	const (
		locks    = 50
		ttl      = 5 * time.Second
		interval = 500 * time.Millisecond
		rounds   = 3
	)
	// Take the locks at about the same time, so that they come due together.
	errs := make(chan error, locks)
	for i := range locks {
		go func() {
			_, err := c.TryAcquire(ctx, "batch-"+string(rune('A'+i)), ttl, fencelock.WithAutoRenew(interval))
			errs <- err
		}()
	}
	for range locks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	hook.reset()
	var pipelines, cmds int
	waitUntil(t, 30*time.Second, "renewals", func() bool {
		p, n := hook.reset()
		pipelines, cmds = pipelines+p, cmds+n
		return cmds >= locks*rounds
	})
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
