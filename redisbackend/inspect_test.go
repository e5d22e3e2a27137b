package redisbackend_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
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
	if !info.Held || info.Owner != "worker-7" || info.Fence != lk.Fence() || len(info.Holds) != 2 {
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
// The count comes from the per-hold fields, not a stored total, and a hold
// whose lease lapsed but that no script has pruned yet is not listed.
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
	if len(info.Holds) != 2 {
		t.Errorf("two live holds: %+v", info.Holds)
	}

	// A re-entrant hold whose lease lapses stays in the hash until a script
	// prunes it; it is not a hold any more.
	short := acquireReq("order:42", "short", "worker-7", 200*time.Millisecond)
	if res, err := b.Acquire(ctx, short); err != nil || res.Holds != 3 {
		t.Fatalf("short re-entry: %+v %v", res, err)
	}
	pollUntil(t, 20*time.Second, "the short hold's lease to lapse", func() bool {
		_, err := b.TTL(ctx, short.Ref)
		return errors.Is(err, fencelock.ErrNotHeld)
	})
	info, err = b.Inspect(ctx, "t", "order:42")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holds) != 2 || info.Holds[0].Token != "inner" || info.Holds[1].Token != "outer" {
		t.Errorf("two live holds and a lapsed one: %+v; want inner and outer", info.Holds)
	}
}

// Inspect shows the permits of the semaphore and the read and write holds
// of the read-write lock of a name, with their kinds, fences and leases,
// beside the plain lock (free here), and the places of waiting writers,
// all in one round trip.
func TestInspectOtherKinds(t *testing.T) {
	b, rdb := newBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("shop"))
	defer c.Close()

	sem := c.Semaphore("partner-api", 3)
	var permits []*fencelock.Lock
	for range 3 {
		lk, err := sem.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, lk)
	}
	reader, err := c.RWLock("partner-api").TryAcquireRead(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() { c.RWLock("partner-api").AcquireWrite(wctx, time.Minute); close(writerDone) }()
	defer func() { stop(); <-writerDone }()

	var info redisbackend.Inspection
	pollUntil(t, 20*time.Second, "the writer's intent and subscription", func() bool {
		if info, err = b.Inspect(ctx, "shop", "partner-api"); err != nil {
			t.Fatal(err)
		}
		return info.RW.WaitingWriters == 1 && info.RW.Waiters == 1
	})
	if info.Held || len(info.Holds) != 0 || !info.AnyHeld() {
		t.Fatalf("the plain lock is free, the name is not: %+v", info)
	}
	if len(info.Others) != 4 {
		t.Fatalf("Others: %+v, want 3 permits and a reader", info.Others)
	}
	for i, want := range append(permits, reader) {
		h := info.Others[i]
		if h.Token != want.Token() || h.Fence != want.Fence() || h.TTL <= 0 || h.TTL > time.Minute {
			t.Errorf("Others[%d] = %+v, want token %s, fence %d", i, h, want.Token(), want.Fence())
		}
		if i == 3 && h.Kind != fencelock.KindRead || i < 3 && h.Kind != fencelock.KindSemaphore {
			t.Errorf("Others[%d] kind %v", i, h.Kind)
		}
	}
	if info.Semaphore.Key != "shop:{partner-api}:sem" || info.Semaphore.LastFence != permits[2].Fence() ||
		info.RW.Key != "shop:{partner-api}:rw" || info.RW.LastFence != reader.Fence() {
		t.Errorf("particulars: semaphore %+v, read-write %+v", info.Semaphore, info.RW)
	}

	// The write hold, once the reader leaves; one round trip per look.
	reader.Release(ctx)
	pollUntil(t, 20*time.Second, "the writer's hold", func() bool {
		info, err = b.Inspect(ctx, "shop", "partner-api")
		return err == nil && len(info.Others) == 4 && info.Others[3].Kind == fencelock.KindWrite
	})
	var trips countTrips
	rdb.AddHook(&trips)
	if _, err := b.Inspect(ctx, "shop", "partner-api"); err != nil {
		t.Fatal(err)
	}
	if n := trips.n.Load(); n != 1 {
		t.Errorf("Inspect made %d round trips, want 1", n)
	}
}

// countTrips counts the round trips of a go-redis client: commands and
// pipelines.
type countTrips struct{ n atomic.Int64 }

func (h *countTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}
