package redisbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

func TestInspect(t *testing.T) {
	b, rdb := newBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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

	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err = b.Inspect(ctx, "shop", "order:42")
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !info.Held || info.Owner != "worker-7" || info.Fence != lk.Fence() || info.Holds != 2 || len(info.Tokens) != 2 {
		t.Fatalf("held lock: %+v", info)
	}
	if info.TTL < 59*time.Second || info.TTL > time.Minute {
		t.Fatalf("TTL %v", info.TTL)
	}
	if info.LastFence != lk.Fence() || info.CounterTTL != -1 {
		t.Fatalf("counter %d (TTL %v), want %d without expiry", info.LastFence, info.CounterTTL, lk.Fence())
	}
	if info.Waiters != 1 {
		t.Fatalf("waiters %d, want 1", info.Waiters)
	}
	inner.Release(ctx)
	lk.Release(ctx)
}
