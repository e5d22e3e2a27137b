package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// WithMaxHold: a lock renewed every 300ms with a maximum
// hold of 2s is renewed until then and never after, and is lost exactly 2s
// after its acquiring request was sent: Done closes, Err and the context
// cause match ErrLost and ErrMaxHoldExceeded, and the hold is released at
// once, so that a waiter gets the lock at that instant instead of after the
// rest of the renewed lease.
func TestMaxHoldLosesAtBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		other := e.client("b")
		bg := context.Background()

		e.sleepUntil(10 * time.Millisecond)
		lk, err := c.Acquire(bg, "k", time.Second,
			fencelock.WithAutoRenew(300*time.Millisecond), fencelock.WithMaxHold(2*time.Second))
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		ctx, cancel := lk.Context(bg)
		defer cancel()
		if got, want := lk.Deadline().Sub(e.start), 910*time.Millisecond; got != want {
			t.Errorf("first deadline at %v, want %v (the lease's, before the bound)", got, want)
		}

		e.sleepUntil(time.Second)
		waiter := e.goAcquire(bg, other, "k", time.Second)

		e.sleepUntil(2010*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if !lk.Held() || tmIsClosed(lk.Done()) {
			t.Fatalf("lost before the bound: Held %v, Err %v", lk.Held(), lk.Err())
		}
		if got := lk.Deadline().Sub(e.start); got != 2010*time.Millisecond {
			t.Errorf("deadline at %v after renewals, want the bound 2.01s", got)
		}

		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !tmIsClosed(lk.Done()) {
			t.Fatal("Done not closed at the bound")
		}
		for name, err := range map[string]error{"Err": lk.Err(), "context cause": context.Cause(ctx)} {
			if !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, fencelock.ErrMaxHoldExceeded) {
				t.Errorf("%s = %v, want ErrLost and ErrMaxHoldExceeded", name, err)
			}
		}
		if msg := lk.Err().Error(); !strings.Contains(msg, "maximum hold") || !strings.Contains(msg, "2s") {
			t.Errorf("Err says %q, want the maximum hold and its value", msg)
		}

		renewals := e.b.at(memorybackend.Renew)
		want := []time.Duration{310, 610, 910, 1210, 1510, 1810}
		if len(renewals) != len(want) {
			t.Fatalf("renewals at %v, want %v ms", renewals, want)
		}
		for i, at := range renewals {
			if at != want[i]*time.Millisecond {
				t.Errorf("renewal %d at %v, want %vms", i, at, want[i])
			}
		}

		r := <-waiter
		if r.err != nil || r.at != 2010*time.Millisecond {
			t.Fatalf("waiter got %v at %v, want the lock at 2.01s (released at the bound)", r.err, r.at)
		}
		if r.lk.Fence() <= lk.Fence() {
			t.Errorf("waiter's fence %d not above the first holder's %d", r.lk.Fence(), lk.Fence())
		}

		// Nothing renews the lost lock later.
		time.Sleep(5 * time.Second)
		if n := len(e.b.at(memorybackend.Renew)); n != len(want) {
			t.Errorf("%d renewals after the bound", n-len(want))
		}
		r.lk.Release(bg)
	})
}

// Do with WithMaxHold: fn's context is cancelled at the bound with cause
// ErrMaxHoldExceeded, and Do's error matches ErrLost and
// ErrMaxHoldExceeded even though fn returned nil.
func TestMaxHoldDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		var cancelledAt time.Duration
		var cause error
		err := c.Do(context.Background(), "k", 3*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
			<-ctx.Done() // a task that only stops when told
			cancelledAt, cause = e.now(), context.Cause(ctx)
			return nil
		}, fencelock.WithMaxHold(10*time.Second))
		if cancelledAt != 10*time.Second {
			t.Errorf("fn's context cancelled at %v, want 10s", cancelledAt)
		}
		if !errors.Is(cause, fencelock.ErrMaxHoldExceeded) {
			t.Errorf("fn's context cause = %v, want ErrMaxHoldExceeded", cause)
		}
		if !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, fencelock.ErrMaxHoldExceeded) {
			t.Errorf("Do = %v, want ErrLost and ErrMaxHoldExceeded", err)
		}
		synctest.Wait()
		if e.state("k").Held() {
			t.Error("the key is still held after the bound")
		}
	})
}

// The bound and the lease are separate: without renewal, a lock whose lease
// ends before the bound is lost at the lease deadline with the usual reason;
// a bound shorter than the lease ends it at the bound.
func TestMaxHoldVersusLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		bg := context.Background()

		short, err := c.TryAcquire(bg, "lease-first", time.Second, fencelock.WithMaxHold(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		bounded, err := c.TryAcquire(bg, "bound-first", 10*time.Second, fencelock.WithMaxHold(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		<-short.Done()
		if at := e.now(); at != 900*time.Millisecond || errors.Is(short.Err(), fencelock.ErrMaxHoldExceeded) {
			t.Errorf("lease-first lost at %v with %v, want 900ms and not the bound", at, short.Err())
		}
		<-bounded.Done()
		if at := e.now(); at != time.Second || !errors.Is(bounded.Err(), fencelock.ErrMaxHoldExceeded) {
			t.Errorf("bound-first lost at %v with %v, want 1s and ErrMaxHoldExceeded", at, bounded.Err())
		}
		// A Refresh cannot push the deadline past the bound either.
		lk, err := c.TryAcquire(bg, "refreshed", time.Second, fencelock.WithMaxHold(1500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(800 * time.Millisecond)
		if err := lk.Refresh(bg, 5*time.Second); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if got, want := lk.Deadline().Sub(e.start), 2500*time.Millisecond; got != want {
			t.Errorf("deadline after Refresh at %v, want the bound %v", got, want)
		}
	})
}

func TestMaxHoldInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		for _, d := range []time.Duration{0, -time.Second, time.Microsecond} {
			_, err := c.TryAcquire(context.Background(), "k", time.Second, fencelock.WithMaxHold(d))
			if !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithMaxHold") {
				t.Errorf("WithMaxHold(%v): %v, want ErrInvalidArgument naming WithMaxHold", d, err)
			}
		}
	})
}

// Against a real redis-server: a lock renewed every second with a 10s lease
// and a 1.5s maximum hold is lost at the bound and released on the server,
// so another Client gets it long before the renewed lease would have ended.
func TestMaxHoldRedis(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	a, b := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)

	start := time.Now()
	lk, err := a.Acquire(ctx, "maxhold", 10*time.Second,
		fencelock.WithAutoRenew(500*time.Millisecond), fencelock.WithMaxHold(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, lk.Done(), 10*time.Second, "Done at the maximum hold")
	if held := time.Since(start); held < 1500*time.Millisecond {
		t.Errorf("lost after %v, before the 1.5s bound", held)
	}
	if err := lk.Err(); !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, fencelock.ErrMaxHoldExceeded) {
		t.Errorf("Err = %v, want ErrLost and ErrMaxHoldExceeded", err)
	}
	// The lease on the server ran at least 10s from the last renewal; the
	// release at the bound lets the waiter in well before that.
	next, err := b.Acquire(ctx, "maxhold", 10*time.Second, fencelock.WithWait(6*time.Second))
	if err != nil {
		t.Fatalf("waiter: %v (the hold was not released at the bound)", err)
	}
	if next.Fence() <= lk.Fence() {
		t.Errorf("fence %d not above %d", next.Fence(), lk.Fence())
	}
	next.Release(ctx)
}
