package redisbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

func TestInspect(t *testing.T) {
	b, rdb := newBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	info, err := b.Inspect(ctx, "shop", "order:42")
	if err != nil || info.Held || info.LastFence != 0 || info.LockKey != "shop:{order:42}:lock" {
		t.Fatalf("a lock never taken: %+v %v", info, err)
	}

	c := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("shop"))
	defer c.Close()
	waiter := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("shop"))
	defer waiter.Close()
	lk, err := c.TryAcquire(fencelock.WithOwner(ctx, "worker-7"), "order:42", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	inner, _ := c.TryAcquire(fencelock.WithOwner(ctx, "worker-7"), "order:42", time.Minute)
	waitCtx, stopWaiting := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { waiter.Acquire(waitCtx, "order:42", time.Second); close(done) }()
	defer func() { stopWaiting(); <-done }()

	pollUntil(t, 20*time.Second, "a waiter subscribed", func() bool {
		info, err = b.Inspect(ctx, "shop", "order:42")
		if err != nil {
			t.Fatal(err)
		}
		return info.Waiters == 1
	})
	if !info.Held || info.Owner != "worker-7" || info.Fence != lk.Fence() || info.Holds != 2 || len(info.Tokens) != 2 {
		t.Fatalf("held lock: %+v", info)
	}
	if info.TTL <= 30*time.Second || info.TTL > time.Minute {
		t.Fatalf("TTL %v", info.TTL)
	}
	if info.LastFence != lk.Fence() || info.CounterTTL != -1 {
		t.Fatalf("counter %d (TTL %v), want %d without expiry", info.LastFence, info.CounterTTL, lk.Fence())
	}
	inner.Release(ctx)
	lk.Release(ctx)
}

// Inspect reports the live holds of a lock: their count and their tokens,
// not a lapsed re-entrant hold that is still in the hash.
//
// Failed from the per-hold lease layout (017b003) until c63b9bd: Inspect
// read the hold count from the "holds" field, which the scripts no longer
// write (Holds was always 0), and listed every t:TOKEN field as a hold,
// including lapsed ones that no script had pruned yet.
func TestInspectCountsLiveHolds(t *testing.T) {
	b, _ := newBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outer := acquireReq("order:42", "outer", "worker-7", time.Minute)
	if res, err := b.Acquire(ctx, outer); err != nil || !res.Acquired {
		t.Fatalf("outer: %+v %v", res, err)
	}
	inner := acquireReq("order:42", "inner", "worker-7", time.Minute)
	if res, err := b.Acquire(ctx, inner); err != nil || res.Holds != 2 {
		t.Fatalf("inner: %+v %v", res, err)
	}
	info, err := b.Inspect(ctx, "t", "order:42")
	if err != nil {
		t.Fatal(err)
	}
	if info.Holds != 2 || len(info.Tokens) != 2 {
		t.Errorf("two live holds: Holds %d, Tokens %v", info.Holds, info.Tokens)
	}

	// A re-entrant hold whose lease lapses stays in the hash until a script
	// prunes it; it is not a hold any more.
	short := acquireReq("order:42", "short", "worker-7", 200*time.Millisecond)
	if res, err := b.Acquire(ctx, short); err != nil || res.Holds != 3 {
		t.Fatalf("short re-entry: %+v %v", res, err)
	}
	pollUntil(t, 20*time.Second, "the short hold's lease to lapse", func() bool {
		_, err := b.TTL(ctx, short.LockRef)
		return errors.Is(err, fencelock.ErrNotHeld)
	})
	info, err = b.Inspect(ctx, "t", "order:42")
	if err != nil {
		t.Fatal(err)
	}
	if info.Holds != 2 || len(info.Tokens) != 2 || len(info.HoldLeases) != 2 {
		t.Errorf("two live holds and a lapsed one: Holds %d, Tokens %v, leases %v; want 2 and [inner outer]",
			info.Holds, info.Tokens, info.HoldLeases)
	}
}
