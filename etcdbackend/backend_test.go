package etcdbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
)

// newLocks returns a fencelock Client on the shared cluster, in a namespace
// of the test's own, closed at cleanup.
func newLocks(t *testing.T, opts ...fencelock.Option) *fencelock.Client {
	t.Helper()
	c := fencelock.New(etcdbackend.New(newClient(t, sharedCluster.Endpoints()...)), append([]fencelock.Option{fencelock.WithNamespace(t.Name())}, opts...)...)
	t.Cleanup(func() { c.Close() })
	return c
}

// etcd leases are whole seconds, at least the server's minimum (2 s with
// the default election timeout): the backend reports the lease it got as
// Validity, and a Lock's local deadline is counted from it.
func TestTTLRoundedUpToTheGrantedLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := etcdbackend.New(newClient(t, sharedCluster.Endpoints()...))
	defer b.Close()
	for _, c := range []struct {
		ttl, validity time.Duration
	}{
		{300 * time.Millisecond, 2 * time.Second},  // below the server's minimum lease
		{2500 * time.Millisecond, 3 * time.Second}, // not whole: rounded up
		{4 * time.Second, 0},                       // granted as asked
	} {
		ref := driver.Ref{Namespace: t.Name(), Key: c.ttl.String(), Token: "tok"}
		res, err := b.Acquire(ctx, driver.Request{Ref: ref, Owner: "tok", TTL: c.ttl})
		if err != nil || !res.Acquired || res.Validity != c.validity {
			t.Fatalf("acquire with ttl %v: %+v %v, want acquired with Validity %v", c.ttl, res, err, c.validity)
		}
		rr, err := b.Renew(ctx, []driver.RenewRequest{{Ref: ref, TTL: c.ttl}})
		if err != nil || !rr[0].Held || rr[0].Validity != c.validity {
			t.Fatalf("renew with ttl %v: %+v %v, want held with Validity %v", c.ttl, rr, err, c.validity)
		}
		if ttl, err := b.TTL(ctx, ref); err != nil || ttl > max(c.ttl, c.validity) {
			t.Fatalf("TTL of a %v lock: %v %v", c.ttl, ttl, err)
		}
	}

	locks := newLocks(t)
	start := time.Now()
	lk, err := locks.TryAcquire(ctx, "sub-second", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	// 2 s less the 10% margin, from before the request: not 300 ms.
	if d := lk.Deadline().Sub(start); d < 1800*time.Millisecond || d > time.Since(start)+1800*time.Millisecond {
		t.Fatalf("local deadline %v after the acquire began, want 1.8 s (the granted 2 s less the margin)", d)
	}
}

// A Refresh to a longer ttl moves the hold to a longer lease, keeping its
// fence; to a shorter one, to a shorter lease.
func TestRefreshChangesTheLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locks := newLocks(t)
	lk, err := locks.TryAcquire(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl, err := lk.TTL(ctx); err != nil || ttl < 55*time.Second {
		t.Fatalf("TTL after Refresh(1m): %v %v", ttl, err)
	}
	if err := lk.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl, err := lk.TTL(ctx); err != nil || ttl > 5*time.Second {
		t.Fatalf("TTL after Refresh(5s): %v %v", ttl, err)
	}
	info, err := locks.Inspect(ctx, "k")
	if err != nil || !info.Held || info.Fence != lk.Fence() || len(info.Holds) != 1 {
		t.Fatalf("Inspect after the refreshes: %+v %v, want held with fence %d", info, err, lk.Fence())
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter wakes on the release itself (the etcd watch), not on its
// fallback timer, which here would sleep for a minute.
func TestWaiterWokenByRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waiting := make(chan struct{}, 1)
	holder, waiter := newLocks(t), newLocks(t, waitStarted(waiting))
	lk, err := holder.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fencelock.Lock, 1)
	go func() {
		w, err := waiter.Acquire(ctx, "k", 10*time.Second, fencelock.WithRetry(fencelock.ConstantBackoff{Delay: time.Minute}))
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	awaitSignal(ctx, t, waiting, "the waiter to find the lock held and watch it")
	released := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-got:
		if w == nil {
			return
		}
		t.Logf("the waiter got the lock %v after the release", time.Since(released))
		if w.Fence() <= lk.Fence() {
			t.Errorf("the waiter's fence %d, want above the holder's %d", w.Fence(), lk.Fence())
		}
		w.Release(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not get the lock within 20s of the release (its fallback timer is 1m)")
	}
}

// Re-entry with WithOwner keeps the fence and counts holds; another owner
// waits until the last hold goes.
func TestReentryThroughTheClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locks, other := newLocks(t), newLocks(t)
	octx := fencelock.WithOwner(ctx, "job-7")
	outer, err := locks.TryAcquire(octx, "k", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := locks.TryAcquire(octx, "k", 5*time.Second)
	if err != nil || inner.Fence() != outer.Fence() || inner.Holds() != 2 {
		t.Fatalf("re-entry: %v, fence %d holds %d, want fence %d and 2 holds", err, inner.Fence(), inner.Holds(), outer.Fence())
	}
	if _, err := other.TryAcquire(ctx, "k", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("another owner: %v, want ErrNotAcquired", err)
	}
	inner.Release(ctx)
	outer.Release(ctx)
	next, err := other.TryAcquire(ctx, "k", time.Second)
	if err != nil || next.Fence() <= outer.Fence() {
		t.Fatalf("after both releases: %v, want acquired with a fence above %d", err, outer.Fence())
	}
	next.Release(ctx)
}

// Bad names are refused with ErrInvalidArgument, never sent.
func TestInvalidArguments(t *testing.T) {
	ctx := context.Background()
	b := etcdbackend.New(newClient(t, sharedCluster.Endpoints()...))
	defer b.Close()
	if _, err := b.Acquire(ctx, driver.Request{Ref: driver.Ref{Key: "k"}, Owner: "o", TTL: time.Second}); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("acquire with an empty token: %v", err)
	}
	if _, err := b.Acquire(ctx, driver.Request{Ref: driver.Ref{Key: "k", Token: "t"}, TTL: time.Second}); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("acquire with an empty owner: %v", err)
	}
	if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: driver.Ref{Token: "t"}}); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("release with an empty key: %v", err)
	}
	if _, err := b.InspectLock(ctx, "ns", ""); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("inspect with an empty key: %v", err)
	}
	if _, err := b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "ns", Key: ""}}); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Errorf("watch with an empty key: %v", err)
	}
}

// Names with slashes and percent signs do not reach each other's keys:
// ("a", "b/c") and ("a/b", "c") are two locks.
func TestNamesDoNotCollide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := newClient(t, sharedCluster.Endpoints()...)
	one := fencelock.New(etcdbackend.New(cli), fencelock.WithNamespace(t.Name()+"/a"))
	two := fencelock.New(etcdbackend.New(cli), fencelock.WithNamespace(t.Name()+"/a/b"))
	defer one.Close()
	defer two.Close()
	a, err := one.TryAcquire(ctx, "b/c", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := two.TryAcquire(ctx, "c", 5*time.Second)
	if err != nil {
		t.Fatalf("a lock whose names join to the same path: %v", err)
	}
	defer b.Release(ctx)
	c, err := one.TryAcquire(ctx, "b%2Fc", 5*time.Second)
	if err != nil {
		t.Fatalf("a key that is another's escaped form: %v", err)
	}
	defer c.Release(ctx)
}

// waitStarted is a hook that signals c when an acquire call begins to wait:
// its attempt found the lock held, and it watches the lock (or, fair, has
// its place in line) before it sleeps.
func waitStarted(c chan<- struct{}) fencelock.Option {
	return fencelock.WithHooks(fencelock.Hooks{WaitStart: func(context.Context, fencelock.WaitEvent) {
		select {
		case c <- struct{}{}:
		default:
		}
	}})
}

// awaitSignal waits for a value on c, failing the test when ctx ends first.
func awaitSignal(ctx context.Context, t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-ctx.Done():
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
	}
}
