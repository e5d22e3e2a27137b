package etcdbackend_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
)

// Fair waiters of different Clients (as of different processes) get the
// lock in the order they joined the line, each woken by its predecessor.
func TestFairWaitersInJoinOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := newLocks(t)
	lk, err := holder.TryAcquire(ctx, "k", time.Minute, fencelock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	waiting := make(chan struct{}, 1)
	for i := range 4 {
		name := fmt.Sprint("w", i)
		locks := newLocks(t, waitStarted(waiting))
		wg.Go(func() {
			// A fallback timer of a minute: only the turn notifications
			// can hand the lock on within the test's time.
			w, err := locks.Acquire(ctx, "k", 10*time.Second, fencelock.WithFairness(),
				fencelock.WithRetry(fencelock.ConstantBackoff{Delay: time.Minute}))
			if err != nil {
				t.Error(name, err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			w.Release(ctx)
		})
		awaitSignal(ctx, t, waiting, name+" to join the line") // before the next one comes
	}
	start := time.Now()
	lk.Release(ctx)
	wg.Wait()
	if fmt.Sprint(order) != "[w0 w1 w2 w3]" {
		t.Fatalf("the lock went to %v, want [w0 w1 w2 w3] (the order of the line)", order)
	}
	t.Logf("four hand-offs in %v", time.Since(start).Round(time.Millisecond))
}

// A release wakes the first waiter of the line and no other: each waiter
// watches only the key just before its own.
func TestFairReleaseWakesOnlyTheNext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := etcdbackend.New(newClient(t, sharedCluster.Endpoints()...))
	defer b.Close()
	ns := t.Name()
	acquire := func(token string) driver.Result {
		req := driver.Request{Ref: driver.Ref{Namespace: ns, Key: "k", Token: token}, Owner: token, TTL: 30 * time.Second}
		res, err := b.AcquireInLine(ctx, req, driver.Turn{Place: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if !acquire("holder").Acquired {
		t.Fatal("the holder was refused a free lock")
	}
	var watches []*driver.Watch
	for _, w := range []string{"w1", "w2", "w3"} {
		if acquire(w).Acquired {
			t.Fatalf("%s took a held lock", w)
		}
		watch, err := b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: ns, Key: "k", Token: w}})
		if err != nil {
			t.Fatal(err)
		}
		defer watch.Stop()
		watches = append(watches, watch)
	}
	if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: driver.Ref{Namespace: ns, Key: "k", Token: "holder"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watches[0].C:
	case <-time.After(10 * time.Second):
		t.Fatal("the first waiter was not told within 10s of the release")
	}
	select {
	case <-watches[1].C:
		t.Fatal("the second waiter was woken by a release that was not its turn")
	case <-watches[2].C:
		t.Fatal("the third waiter was woken by a release that was not its turn")
	case <-time.After(time.Second):
	}
	// w1 gives up: w2 is next, and the lock is free.
	if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: driver.Ref{Namespace: ns, Key: "k", Token: "w1"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watches[1].C:
	case <-time.After(10 * time.Second):
		t.Fatal("the second waiter was not told within 10s of the first giving up")
	}
	if res := acquire("w2"); !res.Acquired {
		t.Fatalf("w2, first in line: %+v, want acquired", res)
	}
}
