package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// A lease shorter than the floor (10 ms) leaves no time for a round trip:
// every call that takes a lease refuses it with an error naming the value
// and the floor, before anything reaches the server, instead of failing
// later as an outage.
func TestTTLFloor(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	ok := func(context.Context, *fencelock.Lock) error { return nil }
	okAll := func(context.Context, *fencelock.MultiLock) error { return nil }
	const floor = 10 * time.Millisecond
	held, err := c.TryAcquire(ctx, "held", time.Minute, fencelock.WithAutoRenew(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	calls := []struct {
		name string
		call func(d time.Duration) error
	}{
		{"TryAcquire", func(d time.Duration) error { _, err := c.TryAcquire(ctx, "k", d); return err }},
		{"Acquire", func(d time.Duration) error { _, err := c.Acquire(ctx, "k", d); return err }},
		{"Do", func(d time.Duration) error { return c.Do(ctx, "k", d, ok) }},
		{"AcquireAll", func(d time.Duration) error { _, err := c.AcquireAll(ctx, []string{"k", "l"}, d); return err }},
		{"AcquireAll WithWait(0)", func(d time.Duration) error {
			_, err := c.AcquireAll(ctx, []string{"k", "l"}, d, fencelock.WithWait(0))
			return err
		}},
		{"DoAll", func(d time.Duration) error { return c.DoAll(ctx, []string{"k", "l"}, d, okAll) }},
		{"Semaphore.TryAcquire", func(d time.Duration) error { _, err := c.Semaphore("k", 2).TryAcquire(ctx, d); return err }},
		{"Semaphore.Acquire", func(d time.Duration) error { _, err := c.Semaphore("k", 2).Acquire(ctx, d); return err }},
		{"RWLock.TryAcquireRead", func(d time.Duration) error { _, err := c.RWLock("k").TryAcquireRead(ctx, d); return err }},
		{"RWLock.AcquireRead", func(d time.Duration) error { _, err := c.RWLock("k").AcquireRead(ctx, d); return err }},
		{"RWLock.TryAcquireWrite", func(d time.Duration) error { _, err := c.RWLock("k").TryAcquireWrite(ctx, d); return err }},
		{"RWLock.AcquireWrite", func(d time.Duration) error { _, err := c.RWLock("k").AcquireWrite(ctx, d); return err }},
		{"Campaign", func(d time.Duration) error { _, err := c.Campaign(ctx, "k", "me", d); return err }},
		{"Job.LockAtMost", func(d time.Duration) error {
			_, err := c.RunJob(ctx, fencelock.Job{Name: "k", LockAtMost: d}, time.Now(), ok)
			return err
		}},
		{"WithMaxHold", func(d time.Duration) error {
			_, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithMaxHold(d))
			return err
		}},
		{"Refresh", func(d time.Duration) error { return held.Refresh(ctx, d) }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range []time.Duration{time.Millisecond, floor - time.Microsecond} {
				err := tc.call(d)
				if !errors.Is(err, fencelock.ErrInvalidArgument) {
					t.Fatalf("%v: %v, want ErrInvalidArgument", d, err)
				}
				if msg := err.Error(); !strings.Contains(msg, d.String()) || !strings.Contains(msg, floor.String()) {
					t.Fatalf("%v: %q does not name the value and the floor %v", d, msg, floor)
				}
			}
		})
	}
	if keys := rdb.Keys(ctx, "lock:{k}*").Val(); len(keys) != 0 {
		t.Fatalf("a refused lease reached the server: %v", keys)
	}
	if !held.Held() {
		t.Fatalf("refused Refreshes hurt the lock: %v", held.Err())
	}
	if fencelock.MinTTL != floor {
		t.Fatalf("MinTTL %v, want %v", fencelock.MinTTL, floor)
	}
}

// The floor itself works on a healthy loopback Redis: a lease of MinTTL
// leaves its attempt the local lease (9 ms) for a round trip that takes a
// fraction of a millisecond, so it is acquired, not reported unavailable.
// (A 1 ms lease failed so in most tries.) The bound allows for a busy
// 2-core machine, whose scheduler may stall a goroutine for milliseconds
// now and then: half the tries may fail (an attempt given up that way may
// hold the key for the next try), and none with a healthy machine.
func TestTTLFloorWorks(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := c.Check(ctx); err != nil { // connect and load the scripts first
		t.Fatal(err)
	}
	const tries = 20
	failed := 0
	lingers := false // the previous try may have left a lease on the key
	for range tries {
		lk, err := c.TryAcquire(ctx, "floor", fencelock.MinTTL)
		switch {
		case errors.Is(err, fencelock.ErrUnavailable):
			failed++
			lingers = true
			t.Logf("TryAcquire with MinTTL: %v", err)
		case errors.Is(err, fencelock.ErrNotAcquired) && lingers:
			// An attempt given up as unavailable may still have landed,
			// and a release may have failed: that lease (or the tombstone
			// that refuses a late acquire) holds the key for up to 10 ms.
			failed++
			t.Logf("TryAcquire with MinTTL after a try that may have left a lease: %v", err)
		case err != nil:
			t.Fatal(err)
		default:
			rerr := lk.Release(ctx)
			lingers = rerr != nil
			if rerr != nil {
				t.Logf("Release of a MinTTL lock: %v", rerr)
			}
		}
	}
	if failed > tries/2 {
		t.Fatalf("%d of %d acquires with MinTTL on a loopback Redis failed as unavailable", failed, tries)
	}
}
