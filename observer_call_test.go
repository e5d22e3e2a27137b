package fencelock_test

// Tests of the hooks that let a tracer follow a call: AcquireStart, whose
// context the call's other hooks get, and ForceReleased.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
)

// startKey is the context key under which the test's AcquireStart hooks
// put the number of the call they saw begin.
type startKey struct{ hooks string }

// callTrace records hook events with the call number that AcquireStart put
// in their context, as a tracer's span would.
type callTrace struct {
	stamp   func() time.Duration // nil: no time
	changed chan struct{}        // nil, or signalled (without blocking) when a line is added
	mu      sync.Mutex
	n       int
	lines   []string
}

func (r *callTrace) add(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if r.stamp != nil {
		line = fmt.Sprintf("%v %s", r.stamp(), line)
	}
	r.mu.Lock()
	r.lines = append(r.lines, line)
	r.mu.Unlock()
	if r.changed != nil {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
}

func (r *callTrace) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := r.lines
	r.lines = nil
	return lines
}

// call names the call of ctx for the hooks named name: "#n", or "-" when
// ctx is not one that AcquireStart returned.
func call(ctx context.Context, name string) string {
	if n, ok := ctx.Value(startKey{name}).(int); ok {
		return fmt.Sprintf("#%d", n)
	}
	return "-"
}

// hooks returns Hooks named name whose AcquireStart numbers the calls.
func (r *callTrace) hooks(name string) fencelock.Hooks {
	return fencelock.Hooks{
		AcquireStart: func(ctx context.Context, e fencelock.AcquireEvent) context.Context {
			r.mu.Lock()
			r.n++
			n := r.n
			r.mu.Unlock()
			r.add("%s start #%d %s %v", name, n, e.Key, e.Kind)
			return context.WithValue(ctx, startKey{name}, n)
		},
		WaitStart: func(ctx context.Context, e fencelock.WaitEvent) {
			r.add("%s wait %s %s %v", name, call(ctx, name), e.Key, e.Kind)
		},
		WaitDone: func(ctx context.Context, e fencelock.WaitEvent) {
			r.add("%s waited %s %s %v", name, call(ctx, name), e.Key, e.Kind)
		},
		AcquireDone: func(ctx context.Context, e fencelock.AcquireEvent) {
			r.add("%s done %s %s %v %s", name, call(ctx, name), e.Key, e.Kind, e.Outcome)
		},
		ForceReleased: func(ctx context.Context, e fencelock.ReleaseEvent) {
			r.add("%s force released %s %v fence=%d reason=%q in %s", name, e.Key, e.Kind, e.Fence, e.Reason, ctx.Value(callerKey{}))
		},
		Lost: func(e fencelock.LostEvent) {
			r.add("%s lost %s %v fence=%d %s", name, e.Key, e.Kind, e.Fence, e.Reason)
		},
	}
}

// callerKey names the caller's context in the tests.
type callerKey struct{}

// TestHooksAcquireStart checks, with exact times, that every acquire call
// is announced by AcquireStart before anything else, and that its wait and
// end are reported with the context AcquireStart returned: accepted,
// refused before any attempt, contended (a wait), of a semaphore and a
// read-write lock. With two sets of hooks, each AcquireStart gets the
// context of the one before, and the later hooks get the last one.
func TestHooksAcquireStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newObsEnv(t)
		rec := &callTrace{stamp: e.now}
		c := e.client("a", fencelock.WithHooks(rec.hooks("h1")), fencelock.WithHooks(rec.hooks("h2")))
		other := e.client("b")
		ctx := context.Background()

		k, err := c.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Acquire(ctx, "k", -1); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Fatalf("Acquire with a negative ttl: %v", err)
		}
		checkLines(t, "accepted and refused", rec.take(),
			"0s h1 start #1 k lock", "0s h2 start #2 k lock",
			"0s h1 done #1 k lock acquired", "0s h2 done #2 k lock acquired",
			"0s h1 start #3 k lock", "0s h2 start #4 k lock",
			"0s h1 done #3 k lock invalid", "0s h2 done #4 k lock invalid")

		held, err := other.TryAcquire(ctx, "w", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() {
			_, err := c.Acquire(ctx, "w", time.Second, fencelock.WithWait(time.Second), fencelock.WithRetry(obsFixedBackoff(time.Second)))
			done <- err
		}()
		time.Sleep(200 * time.Millisecond)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		checkLines(t, "a wait", rec.take(),
			"0s h1 start #5 w lock", "0s h2 start #6 w lock",
			"0s h1 wait #5 w lock", "0s h2 wait #6 w lock",
			"200ms h1 waited #5 w lock", "200ms h2 waited #6 w lock",
			"200ms h1 done #5 w lock acquired", "200ms h2 done #6 w lock acquired")

		if _, err := c.Semaphore("s", 1).TryAcquire(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Semaphore("s", 0).Acquire(ctx, time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Fatalf("Semaphore with 0 permits: %v", err)
		}
		if _, err := c.RWLock("rw").TryAcquireWrite(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		checkLines(t, "kinds", rec.take(),
			"200ms h1 start #7 s semaphore", "200ms h2 start #8 s semaphore",
			"200ms h1 done #7 s semaphore acquired", "200ms h2 done #8 s semaphore acquired",
			"200ms h1 start #9 s semaphore", "200ms h2 start #10 s semaphore",
			"200ms h1 done #9 s semaphore invalid", "200ms h2 done #10 s semaphore invalid",
			"200ms h1 start #11 rw write", "200ms h2 start #12 rw write",
			"200ms h1 done #11 rw write acquired", "200ms h2 done #12 rw write acquired")
		_ = k
	})
}

// TestHooksAcquireStartNil checks that an AcquireStart returning nil leaves
// the call's context to the other hooks.
func TestHooksAcquireStartNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newObsEnv(t)
		var got []any
		c := e.client("a", fencelock.WithHooks(fencelock.Hooks{
			AcquireStart: func(context.Context, fencelock.AcquireEvent) context.Context { return nil },
			AcquireDone:  func(ctx context.Context, _ fencelock.AcquireEvent) { got = append(got, ctx.Value(callerKey{})) },
		}))
		if _, err := c.TryAcquire(context.WithValue(context.Background(), callerKey{}, "caller"), "k", time.Second); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []any{"caller"}) {
			t.Errorf("AcquireDone got the contexts of %v, want the caller's", got)
		}
	})
}

// TestHooksForceReleasedOwnLock checks ForceReleased for a lock of the
// Client that forces it free: its *Lock is lost first, then the hold is
// reported freed, with the operator's reason and context.
func TestHooksForceReleasedOwnLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newObsEnv(t)
		rec := &callTrace{stamp: e.now}
		c := e.client("a", fencelock.WithHooks(rec.hooks("h")))
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		rec.take()
		if _, err := c.ForceRelease(context.WithValue(ctx, callerKey{}, "operator"), "k", "stuck"); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(lk.Err(), fencelock.ErrLost) {
			t.Errorf("the forced lock's Err: %v, want ErrLost", lk.Err())
		}
		checkLines(t, "ForceRelease", rec.take(),
			"1s h lost k lock fence=1 gone",
			`1s h force released k lock fence=1 reason="stuck" in operator`)
	})
}

// TestHooksAcquireStartRedis calls every kind of acquire against a real
// redis-server (TryAcquire, a contended Acquire, Do, AcquireAll, the
// acquires of Semaphore and RWLock, Campaign, RunJob) and checks that each
// call's AcquireStart is answered by exactly one AcquireDone, for the same
// key and kind, in the context AcquireStart returned, and that each wait
// happened within a call that had begun and not ended.
func TestHooksAcquireStartRedis(t *testing.T) {
	_, rdb := startRedis(t)
	type call struct {
		key, kind string
		done      int
		waits     int // WaitStart less WaitDone
	}
	var mu sync.Mutex
	var calls []*call
	var problems []string
	waitStarted := make(chan string, 16) // the key of each WaitStart
	problem := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	of := func(ctx context.Context, what string) *call {
		c, ok := ctx.Value(startKey{"redis"}).(*call)
		if !ok {
			problem("%s without AcquireStart's context", what)
		}
		return c
	}
	hooks := fencelock.Hooks{
		AcquireStart: func(ctx context.Context, e fencelock.AcquireEvent) context.Context {
			mu.Lock()
			defer mu.Unlock()
			c := &call{key: e.Key, kind: e.Kind.String()}
			calls = append(calls, c)
			return context.WithValue(ctx, startKey{"redis"}, c)
		},
		WaitStart: func(ctx context.Context, e fencelock.WaitEvent) {
			mu.Lock()
			defer mu.Unlock()
			if c := of(ctx, "WaitStart "+e.Key); c != nil {
				if c.done > 0 || c.waits != 0 || c.key != e.Key {
					problem("WaitStart %s in call %+v", e.Key, *c)
				}
				c.waits++
			}
			waitStarted <- e.Key
		},
		WaitDone: func(ctx context.Context, e fencelock.WaitEvent) {
			mu.Lock()
			defer mu.Unlock()
			if c := of(ctx, "WaitDone "+e.Key); c != nil {
				if c.done > 0 || c.waits != 1 || c.key != e.Key {
					problem("WaitDone %s in call %+v", e.Key, *c)
				}
				c.waits--
			}
		},
		AcquireDone: func(ctx context.Context, e fencelock.AcquireEvent) {
			mu.Lock()
			defer mu.Unlock()
			if c := of(ctx, "AcquireDone "+e.Key); c != nil {
				if c.key != e.Key || c.kind != e.Kind.String() || c.waits != 0 {
					problem("AcquireDone %s %v in call %+v", e.Key, e.Kind, *c)
				}
				c.done++
			}
		},
	}
	c1 := newClient(t, rdb, fencelock.WithHooks(hooks), fencelock.WithNamespace("start"))
	c2 := newClient(t, rdb, fencelock.WithHooks(hooks), fencelock.WithNamespace("start"))
	ctx := ctxTimeout(t, time.Minute)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	lk, err := c1.TryAcquire(ctx, "a", 10*time.Second)
	must(err)
	if _, err := c2.TryAcquire(ctx, "a", 10*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	waited := make(chan error)
	go func() {
		lk, err := c2.Acquire(ctx, "a", 10*time.Second, fencelock.WithWait(30*time.Second))
		if err == nil {
			err = lk.Release(ctx)
		}
		waited <- err
	}()
	select {
	case key := <-waitStarted:
		mu.Lock()
		waiting := len(calls) == 3 && calls[2].waits == 1
		mu.Unlock()
		if key != "a" || !waiting {
			t.Fatalf("WaitStart of %q, the third call waiting: %v", key, waiting)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the third call did not report its wait within 10s")
	}
	must(lk.Release(ctx))
	must(<-waited)
	must(c1.Do(ctx, "do", 10*time.Second, func(context.Context, *fencelock.Lock) error { return nil }))
	m, err := c1.AcquireAll(ctx, []string{"x", "y"}, 10*time.Second)
	must(err)
	must(m.Release(ctx))
	p, err := c1.Semaphore("s", 2).Acquire(ctx, 10*time.Second)
	must(err)
	must(p.Release(ctx))
	w, err := c2.RWLock("rw").TryAcquireWrite(ctx, 10*time.Second)
	must(err)
	must(w.Release(ctx))
	r, err := c2.RWLock("rw").AcquireRead(ctx, 10*time.Second)
	must(err)
	must(r.Release(ctx))
	l, err := c1.Campaign(ctx, "e", "me", 10*time.Second)
	must(err)
	must(l.Resign(ctx))
	ran, err := c2.RunJob(ctx, fencelock.Job{Name: "j", LockAtMost: 10 * time.Second}, time.Now(), func(context.Context, *fencelock.Lock) error { return nil })
	must(err)
	if !ran {
		t.Fatal("RunJob did not run")
	}

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	var got []string
	for _, c := range calls {
		if c.done != 1 || c.waits != 0 {
			t.Errorf("call %+v: want one AcquireDone and every wait ended", *c)
		}
		got = append(got, c.kind+" "+c.key)
	}
	sort.Strings(got)
	want := []string{"lock a", "lock a", "lock a", "lock do", "lock election:e", "lock job:j", "lock x", "lock y", "read rw", "semaphore s", "write rw"}
	if !slices.Equal(got, want) {
		t.Errorf("calls begun:\n\t%q\nwant\n\t%q", got, want)
	}
}

// TestHooksForceReleasedRedis forces free, from another Client, a name
// whose lock, two permits and a read hold a Client holds on a real
// redis-server: ForceReleased reports each hold freed, with its kind and
// fence, the operator's reason and the call's context, and the holder's
// *Locks are lost at their next renewal.
func TestHooksForceReleasedRedis(t *testing.T) {
	_, rdb := startRedis(t)
	holderLog, operatorLog := &callTrace{changed: make(chan struct{}, 1)}, &callTrace{}
	holder := newClient(t, rdb, fencelock.WithHooks(holderLog.hooks("holder")), fencelock.WithNamespace("forced"))
	operator := newClient(t, rdb, fencelock.WithHooks(operatorLog.hooks("operator")), fencelock.WithNamespace("forced"))
	ctx := ctxTimeout(t, time.Minute)
	renew := fencelock.WithAutoRenew(50 * time.Millisecond)
	lk, err := holder.Acquire(ctx, "n", 10*time.Second, renew)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := holder.Semaphore("n", 3).Acquire(ctx, 10*time.Second, renew)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := holder.Semaphore("n", 3).Acquire(ctx, 10*time.Second, renew)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := holder.RWLock("n").AcquireRead(ctx, 10*time.Second, renew)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.ForceRelease(context.WithValue(ctx, callerKey{}, "operator"), "n", "stuck worker"); err != nil {
		t.Fatal(err)
	}
	got := operatorLog.take()
	sort.Strings(got)
	want := []string{
		fmt.Sprintf(`operator force released n lock fence=%d reason="stuck worker" in operator`, lk.Fence()),
		fmt.Sprintf(`operator force released n read fence=%d reason="stuck worker" in operator`, rd.Fence()),
		fmt.Sprintf(`operator force released n semaphore fence=%d reason="stuck worker" in operator`, p1.Fence()),
		fmt.Sprintf(`operator force released n semaphore fence=%d reason="stuck worker" in operator`, p2.Fence()),
	}
	sort.Strings(want)
	checkLines(t, "ForceReleased", got, want...)
	for _, l := range []*fencelock.Lock{lk, p1, p2, rd} {
		waitDone(t, l.Done(), 10*time.Second, "loss of a forced hold")
	}
	// Lost runs just after Done is closed, on the keeper's goroutine.
	var lost []string
	timeout := time.After(10 * time.Second)
	for len(lost) < 4 {
		for _, l := range holderLog.take() {
			if strings.Fields(l)[1] == "lost" {
				lost = append(lost, l)
			}
		}
		if len(lost) >= 4 {
			break
		}
		select {
		case <-holderLog.changed:
			continue
		case <-timeout:
		}
		break
	}
	sort.Strings(lost)
	want = []string{
		fmt.Sprintf("holder lost n lock fence=%d gone", lk.Fence()),
		fmt.Sprintf("holder lost n read fence=%d gone", rd.Fence()),
		fmt.Sprintf("holder lost n semaphore fence=%d gone", p1.Fence()),
		fmt.Sprintf("holder lost n semaphore fence=%d gone", p2.Fence()),
	}
	sort.Strings(want)
	checkLines(t, "the holder's losses", lost, want...)
}
