package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/redis/go-redis/v9"
)

// Eight Clients (as if eight processes) with eight goroutines each take
// turns on one key: never more than one of them is inside at a time.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	const clients, goroutines, rounds = 8, 8, 50
	ctx := ctxTimeout(t, 2*time.Minute)

	var inside, maxInside, entered atomic.Int64
	var lastFence atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients*goroutines)
	for range clients {
		c := newClient(t, newRedisClient(t, rdb.Options().Addr))
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					lk, err := c.Acquire(ctx, "mutex", 10*time.Second)
					if err != nil {
						errs <- err
						return
					}
					n := inside.Add(1)
					if n > maxInside.Load() {
						maxInside.Store(n)
					}
					if prev := lastFence.Swap(lk.Fence()); prev >= lk.Fence() {
						errs <- fmt.Errorf("fence %d after %d", lk.Fence(), prev)
					}
					entered.Add(1)
					inside.Add(-1)
					if err := lk.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := maxInside.Load(); got != 1 {
		t.Errorf("at most %d goroutines were inside at once, want 1", got)
	}
	if got := entered.Load(); got != clients*goroutines*rounds {
		t.Errorf("entered %d times, want %d", got, clients*goroutines*rounds)
	}
}

func TestFencesStrictlyIncrease(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, time.Minute)
	var last int64
	for i := range 1000 {
		lk, err := c.TryAcquire(ctx, "fences", time.Second)
		if err != nil {
			t.Fatalf("acquisition %d: %v", i, err)
		}
		if lk.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d not above %d", i, lk.Fence(), last)
		}
		last = lk.Fence()
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Fences are floored by the server's clock, so they keep growing after a
// restart that lost every key (no persistence).
func TestFencesIncreaseAcrossServerRestart(t *testing.T) {
	srv, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, time.Minute)

	// Push the counter far ahead of the clock first: it must not go back
	// below what was handed out before the restart either... it can, since
	// the counter is gone; what matters is the clock floor, checked below.
	var before int64
	for range 10 {
		lk, err := c.TryAcquire(ctx, "restart", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		before = lk.Fence()
		lk.Release(ctx)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "lock:{restart}:fence").Val(); n != 0 {
		t.Fatalf("the fence counter survived the restart: the test needs a server without persistence")
	}
	// The pool's connections died with the server: calls fail until
	// go-redis has replaced them.
	var lk *fencelock.Lock
	var err error
	waitUntil(t, 30*time.Second, "an acquire after the restart", func() bool {
		lk, err = c.TryAcquire(ctx, "restart", time.Second)
		return err == nil
	})
	if lk.Fence() <= before {
		t.Fatalf("fence after restart %d, not above %d before", lk.Fence(), before)
	}
}

func TestTryAcquireHeldKey(t *testing.T) {
	_, rdb := startRedis(t)
	c1, c2 := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)
	lk, err := c1.TryAcquire(ctx, "held", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.TryAcquire(ctx, "held", 5*time.Second)
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrNotAcquired", err)
	}
	var na *fencelock.NotAcquiredError
	if !errors.As(err, &na) || na.HolderTTL <= 0 || na.HolderTTL > 5*time.Second {
		t.Fatalf("want the holder's remaining lease in the error, got %#v", na)
	}
	// The same Client without WithOwner does not re-enter either.
	if _, err := c1.TryAcquire(ctx, "held", 5*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire by the same client: %v, want ErrNotAcquired", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("second Release: %v, want nil (idempotent)", err)
	}
	if !errors.Is(lk.Err(), fencelock.ErrReleased) || lk.Held() {
		t.Fatalf("after Release: Err %v, Held %v", lk.Err(), lk.Held())
	}
	select {
	case <-lk.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if n := rdb.Exists(ctx, "lock:{held}:lock").Val(); n != 0 {
		t.Fatal("the lock key is still there after Release")
	}
}

func TestReentrantAcquire(t *testing.T) {
	_, rdb := startRedis(t)
	c, other := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)
	owner := fencelock.WithOwner(ctx, "worker-1/job-7")

	outer, err := c.Acquire(owner, "re", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.TryAcquire(owner, "re", 5*time.Second)
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if inner.Fence() != outer.Fence() {
		t.Fatalf("re-entry fence %d, want the outer's %d", inner.Fence(), outer.Fence())
	}
	if inner.Holds() != 2 || inner.Token() == outer.Token() {
		t.Fatalf("re-entry: holds %d, tokens %s %s", inner.Holds(), inner.Token(), outer.Token())
	}
	// Another owner is refused while any hold remains.
	if _, err := other.TryAcquire(fencelock.WithOwner(ctx, "worker-2"), "re", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("other owner: %v", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, "re", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("after one of two releases: %v, want still held", err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err := other.TryAcquire(ctx, "re", time.Second)
	if err != nil {
		t.Fatalf("after both releases: %v", err)
	}
	if lk.Fence() <= outer.Fence() {
		t.Fatalf("new acquisition fence %d not above %d", lk.Fence(), outer.Fence())
	}
}

// A holder whose lease expired cannot release or renew the successor's lock.
func TestStaleHolder(t *testing.T) {
	_, rdb := startRedis(t)
	stale, next := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)

	// Short, but not so short that a loaded machine's round trip outlasts
	// it (the acquire would then fail as too late).
	old, err := stale.TryAcquire(ctx, "stale", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, old.Done(), 20*time.Second, "local lease deadline of the stale holder")
	if !errors.Is(old.Err(), fencelock.ErrLost) || old.Held() {
		t.Fatalf("stale holder: Err %v Held %v, want ErrLost", old.Err(), old.Held())
	}
	var successor *fencelock.Lock
	for successor == nil { // the server's lease may end a hair after ours
		successor, err = next.TryAcquire(ctx, "stale", 10*time.Second)
		if err != nil && !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatal(err)
		}
	}
	if err := old.Refresh(ctx, time.Second); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("stale Refresh: %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("stale Release: %v, want ErrNotHeld", err)
	}
	if _, err := old.TTL(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("stale TTL: %v, want ErrNotHeld", err)
	}
	if !successor.Held() {
		t.Fatal("the successor lost its lock")
	}
	ttl, err := successor.TTL(ctx)
	if err != nil || ttl <= 5*time.Second || ttl > 10*time.Second {
		t.Fatalf("successor TTL %v, %v: want its own 10s lease", ttl, err)
	}
	if got := rdb.HGet(ctx, "lock:{stale}:lock", "owner").Val(); got != successor.Token() {
		t.Fatalf("owner on the server %q, want the successor's token", got)
	}
}

func TestRefreshExtendsServerTTL(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)
	lk, err := c.TryAcquire(ctx, "refresh", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := lk.Deadline()
	if err := lk.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	ttl, err := lk.TTL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 30*time.Second || ttl > time.Minute {
		t.Fatalf("TTL after Refresh(1m) = %v", ttl)
	}
	if pttl := rdb.PTTL(ctx, "lock:{refresh}:lock").Val(); pttl <= 30*time.Second {
		t.Fatalf("server PTTL %v after Refresh(1m)", pttl)
	}
	if !lk.Deadline().After(before.Add(50 * time.Second)) {
		t.Fatalf("local deadline not moved: %v -> %v", before, lk.Deadline())
	}
	// Refresh never re-creates a lock that is gone.
	rdb.Del(ctx, "lock:{refresh}:lock")
	if err := lk.Refresh(ctx, time.Minute); !errors.Is(err, fencelock.ErrNotHeld) || !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("Refresh of a deleted lock: %v, want ErrNotHeld and ErrLost", err)
	}
	if n := rdb.Exists(ctx, "lock:{refresh}:lock").Val(); n != 0 {
		t.Fatal("Refresh re-created the lock")
	}
	if !errors.Is(lk.Err(), fencelock.ErrLost) {
		t.Fatalf("Err %v, want ErrLost", lk.Err())
	}
}

// The lock's keys follow the documented layout and share one hash tag.
func TestKeyLayout(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb, fencelock.WithNamespace("shop"))
	ctx := ctxTimeout(t, 10*time.Second)
	sub := rdb.Subscribe(ctx, "shop:{order:42}:released")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 30 * time.Second
	lk, err := c.TryAcquire(ctx, "order:42", ttl)
	if err != nil {
		t.Fatal(err)
	}
	got := rdb.HGetAll(ctx, "shop:{order:42}:lock").Val()
	serverNow := rdb.Time(ctx).Val().UnixMilli()
	ends, _ := strconv.ParseInt(got["t:"+lk.Token()], 10, 64)
	if ends <= serverNow || ends > serverNow+ttl.Milliseconds() {
		t.Fatalf("hold field t:%s = %q, want the lease's end in server ms (now %d + up to %d)",
			lk.Token(), got["t:"+lk.Token()], serverNow, ttl.Milliseconds())
	}
	got["t:"+lk.Token()] = "ends"
	want := map[string]string{"owner": lk.Token(), "fence": fmt.Sprint(lk.Fence()), "t:" + lk.Token(): "ends"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lock hash %v, want %v", got, want)
	}
	if v := rdb.Get(ctx, "shop:{order:42}:fence").Val(); v != fmt.Sprint(lk.Fence()) {
		t.Fatalf("fence counter %q, want %d", v, lk.Fence())
	}
	if ttl := rdb.PTTL(ctx, "shop:{order:42}:fence").Val(); ttl != -1 {
		t.Fatalf("fence counter has a TTL (%v): it must never expire", ttl)
	}
	// The release publishes only when an acquire was refused meanwhile, as
	// a waiter's is.
	if _, err := newClient(t, rdb, fencelock.WithNamespace("shop")).TryAcquire(ctx, "order:42", ttl); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	if got := rdb.HGet(ctx, "shop:{order:42}:lock", "waited").Val(); got != "1" {
		t.Fatalf("refused acquire left waited = %q in the hash, want 1", got)
	}
	lk.Release(ctx)
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Channel != "shop:{order:42}:released" {
		t.Fatalf("release message %v, %v", msg, err)
	}
	slots := map[int64]bool{}
	for _, k := range []string{"shop:{order:42}:lock", "shop:{order:42}:fence", "shop:{order:42}:released"} {
		slots[rdb.ClusterKeySlot(ctx, k).Val()] = true
	}
	if len(slots) != 1 {
		t.Fatalf("the lock's keys are in %d slots, want 1", len(slots))
	}
}

// An acquire is one round trip, and so is a release.
func TestRoundTrips(t *testing.T) {
	_, rdb := startRedis(t)
	counter := &countingHook{}
	rdb.AddHook(counter)
	c := newClient(t, rdb)
	ctx := context.Background()
	rdb.Ping(ctx) // load nothing lazily during the count
	counter.reset()
	lk, err := c.TryAcquire(ctx, "rt", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.reset(); n != 1 {
		t.Errorf("uncontended acquire took %d round trips, want 1", n)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counter.reset(); n != 1 {
		t.Errorf("release took %d round trips, want 1", n)
	}
}

// countingHook counts the commands and pipelines go-redis sends.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) reset() int64 { return h.n.Swap(0) }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// The local deadline is measured from before the request was sent, less the
// safety margin (a tenth of the ttl by default), so it ends before the
// server's lease.
func TestLocalDeadlineEndsBeforeServerLease(t *testing.T) {
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 10*time.Second)
	const ttl = 10 * time.Second
	before := time.Now()
	lk, err := c.TryAcquire(ctx, "deadline", ttl)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	pttl := rdb.PTTL(ctx, "lock:{deadline}:lock").Val()
	lease := ttl - ttl/10
	if d := lk.Deadline(); d.Before(before.Add(lease)) || d.After(after.Add(lease)) {
		t.Fatalf("local deadline %v not within [%v, %v] (the request's send time + ttl - 10%%)",
			d, before.Add(lease), after.Add(lease))
	}
	if local := time.Until(lk.Deadline()); local >= pttl {
		t.Fatalf("local lease %v not shorter than the server's %v", local, pttl)
	}
}
