package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
)

// Management by key, against a real redis-server: another
// Client, which holds no *Lock, sees the holder, its fence and leases.
func TestInspectByKey(t *testing.T) {
	_, rdb := startRedis(t)
	holder, admin := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)

	if info, err := admin.Inspect(ctx, "report"); err != nil || info.Held || info.Key != "report" {
		t.Fatalf("free lock: %+v %v", info, err)
	}
	lk, err := holder.TryAcquire(ctx, "report", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	info, err := admin.Inspect(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Owner != lk.Token() || info.Fence != lk.Fence() || info.LastFence != lk.Fence() ||
		len(info.Holds) != 1 || info.Holds[0].Token != lk.Token() {
		t.Fatalf("held lock: %+v, want the holder's token %s and fence %d", info, lk.Token(), lk.Fence())
	}
	// The lock's TTL (the key's PTTL) and the hold's (its lease end less
	// the server's TIME) are read in one script but rounded apart: they
	// may differ by a millisecond.
	if d := info.Holds[0].TTL - info.TTL; info.TTL <= 5*time.Second || info.TTL > 10*time.Second || d < -5*time.Millisecond || d > 5*time.Millisecond {
		t.Errorf("lease %v (hold %v), want close to 10s", info.TTL, info.Holds[0].TTL)
	}
	if _, err := admin.Inspect(ctx, ""); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("Inspect of an empty key: %v, want ErrInvalidArgument", err)
	}
}

// ReleaseToken releases a hold by its token from another Client: only the
// right token does anything, re-entrant holds go one at a time, a waiter
// is woken when the last goes, and the holder's *Lock learns of it at its
// next renewal (ErrLost).
func TestReleaseToken(t *testing.T) {
	_, rdb := startRedis(t)
	holder, other, waiterClient := newClient(t, rdb), newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)

	// A lock taken in one request...
	lk, err := holder.TryAcquire(ctx, "order:7", 30*time.Second, fencelock.WithAutoRenew(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// ... and released in another, which has only its token.
	if _, err := other.ReleaseToken(ctx, "order:7", "not-the-token"); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("wrong token: %v, want ErrNotHeld", err)
	}
	if info, _ := other.Inspect(ctx, "order:7"); !info.Held {
		t.Fatal("a wrong token released the lock")
	}
	waited := make(chan error, 1)
	go func() {
		w, err := waiterClient.Acquire(ctx, "order:7", 10*time.Second)
		if err == nil {
			defer w.Release(ctx)
			if w.Fence() <= lk.Fence() {
				err = errors.New("the waiter's fence is not above the released holder's")
			}
		}
		waited <- err
	}()
	time.Sleep(200 * time.Millisecond) // the waiter is subscribed, the lock marked as waited for
	remaining, err := other.ReleaseToken(ctx, "order:7", lk.Token())
	if err != nil || remaining != 0 {
		t.Fatalf("ReleaseToken: %d holds left, %v; want 0, nil", remaining, err)
	}
	start := time.Now()
	if err := <-waited; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// The lease was 30s: the waiter got in by the release, not the expiry.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("waiter took %v after the release", d)
	}
	waitDone(t, lk.Done(), 5*time.Second, "the holder's loss at its next renewal")
	if !errors.Is(lk.Err(), fencelock.ErrLost) {
		t.Errorf("holder's Err = %v, want ErrLost", lk.Err())
	}
	if _, err := other.ReleaseToken(ctx, "order:7", lk.Token()); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Errorf("second ReleaseToken: %v, want ErrNotHeld", err)
	}

	// Re-entrant holds: one token's hold goes, the owner keeps the others.
	octx := fencelock.WithOwner(ctx, "worker-1")
	outer, err := holder.TryAcquire(octx, "reentrant", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := holder.TryAcquire(octx, "reentrant", 10*time.Second)
	if err != nil || inner.Holds() != 2 {
		t.Fatalf("re-entry: %v, %d holds", err, inner.Holds())
	}
	if remaining, err := other.ReleaseToken(ctx, "reentrant", inner.Token()); err != nil || remaining != 1 {
		t.Fatalf("release of the inner hold: %d left, %v; want 1", remaining, err)
	}
	if _, err := other.TryAcquire(ctx, "reentrant", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("another owner got a lock whose outer hold remains: %v", err)
	}
	if remaining, err := other.ReleaseToken(ctx, "reentrant", outer.Token()); err != nil || remaining != 0 {
		t.Fatalf("release of the outer hold: %d left, %v; want 0", remaining, err)
	}
	for _, bad := range []struct{ key, token string }{{"", "x"}, {"k", ""}} {
		if _, err := other.ReleaseToken(ctx, bad.key, bad.token); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("ReleaseToken(%q, %q): %v, want ErrInvalidArgument", bad.key, bad.token, err)
		}
	}
}

// ForceRelease frees a lock whoever holds it (all of its re-entrant holds),
// logs it at Warn with the reason and the holder, lets a waiter in at once
// with a larger fence, and needs a reason.
func TestForceRelease(t *testing.T) {
	_, rdb := startRedis(t)
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	holder, waiterClient := newClient(t, rdb), newClient(t, rdb)
	admin := newClient(t, rdb, fencelock.WithLogger(logger))
	ctx := ctxTimeout(t, 20*time.Second)

	if _, err := admin.ForceRelease(ctx, "stuck", ""); !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("ForceRelease without a reason: %v, want ErrInvalidArgument naming the reason", err)
	}
	if before, err := admin.ForceRelease(ctx, "stuck", "nothing to free"); err != nil || before.Held {
		t.Fatalf("ForceRelease of a free lock: %+v, %v", before, err)
	}
	if strings.Contains(logs.String(), "force release") {
		t.Errorf("a force release of a free lock was logged:\n%s", logs.String())
	}

	octx := fencelock.WithOwner(ctx, "batch-7")
	first, err := holder.TryAcquire(octx, "stuck", time.Minute, fencelock.WithAutoRenew(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.TryAcquire(octx, "stuck", time.Minute); err != nil {
		t.Fatal(err)
	}
	waited := make(chan *fencelock.Lock, 1)
	go func() {
		w, err := waiterClient.Acquire(ctx, "stuck", 10*time.Second)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waited <- w
	}()
	time.Sleep(200 * time.Millisecond)

	before, err := admin.ForceRelease(ctx, "stuck", "batch-7 hung on a dead NFS mount (ticket 1234)")
	if err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if !before.Held || before.Owner != "batch-7" || before.Fence != first.Fence() || len(before.Holds) != 2 {
		t.Errorf("state before: %+v, want held by batch-7 with 2 holds and fence %d", before, first.Fence())
	}
	var w *fencelock.Lock
	select {
	case w = <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock after the force release (its lease was a minute)")
	}
	if w == nil {
		return
	}
	if w.Fence() <= first.Fence() {
		t.Errorf("fence after the force release %d, not above the forced-out holder's %d", w.Fence(), first.Fence())
	}
	w.Release(ctx)
	waitDone(t, first.Done(), 5*time.Second, "the forced-out holder's loss")

	out := logs.String()
	for _, want := range []string{`level=WARN msg="fencelock: force release" key=stuck reason="batch-7 hung on a dead NFS mount (ticket 1234)" owner=batch-7`, "holds=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, first.Token()) {
		t.Error("a whole owner token was logged")
	}
}

// A store without an Inspector: Inspect and ForceRelease say so
// (ErrUnsupported, naming the interface); ReleaseToken works on every
// backend.
func TestManageUnsupported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a") // tmShared has no Inspector
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Inspect(ctx, "k"); !errors.Is(err, fencelock.ErrUnsupported) || !strings.Contains(err.Error(), "driver.Inspector") {
			t.Errorf("Inspect: %v, want ErrUnsupported naming driver.Inspector", err)
		}
		if _, err := c.ForceRelease(ctx, "k", "test"); !errors.Is(err, fencelock.ErrUnsupported) {
			t.Errorf("ForceRelease: %v, want ErrUnsupported", err)
		}
		if n, err := c.ReleaseToken(ctx, "k", lk.Token()); err != nil || n != 0 {
			t.Errorf("ReleaseToken: %d, %v", n, err)
		}
		if e.state("k").Held() {
			t.Error("still held after ReleaseToken")
		}
	})
}

// ReleaseToken and ForceRelease of a hold whose *Lock is of the same
// Client end that *Lock at once (lost, reason "gone"), and so let the Client's
// waiters for the key go ahead: while the Client holds a key its waiters
// make no attempt, so before, they waited for the *Lock to learn of the
// loss at its next renewal (here 20s away), against a real redis-server.
func TestReleaseByTokenEndsLockOfSameClient(t *testing.T) {
	_, rdb := startRedis(t)
	var losses atomic.Int64
	waiting := make(chan string, 1)
	c := newClient(t, rdb, fencelock.WithHooks(fencelock.Hooks{
		WaitStart: func(_ context.Context, e fencelock.WaitEvent) { waiting <- e.Key },
		Lost: func(e fencelock.LostEvent) {
			if e.Reason == "gone" {
				losses.Add(1)
			}
		},
	}))
	ctx := ctxTimeout(t, 30*time.Second)

	for _, tc := range []struct {
		name    string
		release func(lk *fencelock.Lock) error
	}{
		{"ReleaseToken", func(lk *fencelock.Lock) error {
			_, err := c.ReleaseToken(ctx, lk.Key(), lk.Token())
			return err
		}},
		{"ForceRelease", func(lk *fencelock.Lock) error {
			_, err := c.ForceRelease(ctx, lk.Key(), "test")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "same-client-" + tc.name
			lk, err := c.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() {
				w, err := c.Acquire(ctx, key, 10*time.Second)
				if err == nil {
					if w.Fence() <= lk.Fence() {
						err = fmt.Errorf("the waiter's fence %d is not above the released holder's %d", w.Fence(), lk.Fence())
					}
					w.Release(ctx)
				}
				waited <- err
			}()
			<-waiting // the waiter is in the Client's line, behind the *Lock
			lost := losses.Load()
			if err := tc.release(lk); err != nil {
				t.Fatal(err)
			}
			select {
			case <-lk.Done():
			default:
				t.Fatalf("the *Lock was not ended when %s returned", tc.name)
			}
			if !errors.Is(lk.Err(), fencelock.ErrLost) {
				t.Errorf("Err = %v, want ErrLost", lk.Err())
			}
			if losses.Load() != lost+1 {
				t.Errorf("Lost hooks with reason gone: %d, want 1", losses.Load()-lost)
			}
			select {
			case err := <-waited:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the waiter of the same Client did not get the lock after the release (the *Lock's renewal was 20s away)")
			}
			if err := lk.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
				t.Errorf("Release of the ended *Lock: %v, want ErrNotHeld", err)
			}
		})
	}
}
