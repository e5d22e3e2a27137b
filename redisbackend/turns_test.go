package redisbackend_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// Processes that wait for a lock take turns (redisbackend/lua/turns.lua):
// a waiter's refused attempt puts its process in line (field p:ID of the
// lock's hash), and the release that frees the lock wakes the first
// process in line alone.

// turnProcess is a Client on a Backend and go-redis client of its own, as
// a separate process would have, whose process woken for its turn has the
// lock to itself for grace.
func turnProcess(t *testing.T, addr string, grace time.Duration) (*fencelock.Client, *redisbackend.Backend) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b := redisbackend.New(rdb)
	redisbackend.SetTurnGrace(b, grace)
	c := fencelock.New(b, fencelock.WithNamespace("fair")) // the namespace of the child processes (fair_test.go)
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c, b
}

// turnServer starts a redis-server for a test of turns, and returns its
// address, a client of it for the test's own reads, and a context that
// ends after limit.
func turnServer(t *testing.T, limit time.Duration) (string, *redis.Client, context.Context) {
	t.Helper()
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return srv.Addr(), rdb, ctx
}

// inLine reports whether the process with notifier id id is
// in line for key.
func inLine(rdb *redis.Client, key, id string) bool {
	return rdb.HExists(context.Background(), "fair:{"+key+"}:lock", "p:"+id).Val()
}

// acquireAsync starts Acquire of key on c, and sends its lock (nil when it
// failed) with the name given.
func acquireAsync(ctx context.Context, t *testing.T, c *fencelock.Client, key, name string, got chan<- string, locks chan<- *fencelock.Lock) {
	go func() {
		lk, err := c.Acquire(ctx, key, 30*time.Second)
		if err != nil {
			t.Errorf("%s: Acquire: %v", name, err)
		}
		got <- name
		locks <- lk
	}()
}

// The lock goes to the processes in the order in which they got in line,
// after the holder's process has handed it on to its own waiter (its turn
// lasts a few holds). The grace is long, so that the order does not depend
// on how fast the machine is.
func TestProcessesTakeTurns(t *testing.T) {
	addr, rdb, ctx := turnServer(t, 2*time.Minute)
	a, _ := turnProcess(t, addr, time.Minute)
	b, bb := turnProcess(t, addr, time.Minute)
	c, bc := turnProcess(t, addr, time.Minute)

	lk, err := a.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 3)
	locks := make(chan *fencelock.Lock, 3)
	acquireAsync(ctx, t, b, "k", "b", got, locks)
	pollUntil(t, 30*time.Second, "process b in line", func() bool { return inLine(rdb, "k", redisbackend.ProcessID(bb)) })
	acquireAsync(ctx, t, c, "k", "c", got, locks)
	pollUntil(t, 30*time.Second, "process c in line", func() bool { return inLine(rdb, "k", redisbackend.ProcessID(bc)) })
	acquireAsync(ctx, t, a, "k", "a's second waiter", got, locks)
	// It waits behind a's hold (nothing to attempt, so not in line), and
	// watches the key: a's process subscribes too.
	pollUntil(t, 30*time.Second, "a's second waiter watching", func() bool {
		return rdb.PubSubNumSub(ctx, "fair:{k}:released").Val()["fair:{k}:released"] == 3
	})

	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 3 {
		select {
		case name := <-got:
			order = append(order, name)
			next := <-locks
			if next == nil {
				t.FailNow()
			}
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("the lock went to %v, then to nobody", order)
		}
	}
	if want := []string{"a's second waiter", "b", "c"}; !slices.Equal(order, want) {
		t.Fatalf("the lock went to %v, want %v: the holder's process's waiter, then the processes in the order they got in line", order, want)
	}
	if n := rdb.Exists(ctx, "fair:{k}:lock").Val(); n != 0 {
		t.Errorf("the lock key is left after the last release (%d)", n)
	}
}

// A refused TryAcquire does not put its process in line: it does not wait.
// A waiting Acquire does, once.
func TestTryAcquireDoesNotGetInLine(t *testing.T) {
	addr, rdb, ctx := turnServer(t, time.Minute)
	a, _ := turnProcess(t, addr, time.Minute)
	b, bb := turnProcess(t, addr, time.Minute)

	lk, err := a.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "k", 30*time.Second); err == nil {
		t.Fatal("TryAcquire of a held lock succeeded")
	}
	if inLine(rdb, "k", redisbackend.ProcessID(bb)) {
		t.Fatal("a refused TryAcquire put its process in line")
	}
	got := make(chan string, 1)
	locks := make(chan *fencelock.Lock, 1)
	acquireAsync(ctx, t, b, "k", "b", got, locks)
	pollUntil(t, 30*time.Second, "the waiting process in line", func() bool { return inLine(rdb, "k", redisbackend.ProcessID(bb)) })
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-got
	if next := <-locks; next != nil {
		next.Release(ctx)
	}
}

// A process whose turn comes when none of its waiters waits any more (they
// gave up) lets the others go at once, without waiting out its grace.
func TestTurnDeclinedWhenWaiterGaveUp(t *testing.T) {
	addr, rdb, ctx := turnServer(t, 2*time.Minute)
	const grace = time.Minute
	a, _ := turnProcess(t, addr, grace)
	b, bb := turnProcess(t, addr, grace)
	c, bc := turnProcess(t, addr, grace)

	lk, err := a.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bctx, giveUp := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() {
		_, err := b.Acquire(bctx, "k", 30*time.Second)
		bDone <- err
	}()
	pollUntil(t, 30*time.Second, "process b in line", func() bool { return inLine(rdb, "k", redisbackend.ProcessID(bb)) })
	got := make(chan string, 1)
	locks := make(chan *fencelock.Lock, 1)
	acquireAsync(ctx, t, c, "k", "c", got, locks)
	pollUntil(t, 30*time.Second, "process c in line", func() bool { return inLine(rdb, "k", redisbackend.ProcessID(bc)) })
	giveUp()
	if err := <-bDone; err == nil {
		t.Fatal("b's Acquire succeeded after it gave up")
	}

	released := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// b's turn comes first; b declines it, and c takes the lock long
	// before the grace would have let it.
	select {
	case <-got:
		if next := <-locks; next != nil {
			next.Release(ctx)
		}
		t.Logf("c got the lock %v after the release", time.Since(released))
	case <-time.After(grace / 2):
		t.Fatalf("c did not get the lock within %v of the release (b's grace is %v): b did not decline its turn", grace/2, grace)
	}
}

// A process killed (SIGKILL) while in line, whose turn comes, holds the
// others up for its grace, and no longer: the next process in line takes
// the lock then. Before the grace has passed, the lock stays free for it.
func TestTurnOfKilledProcessLapses(t *testing.T) {
	addr, rdb, ctx := turnServer(t, 2*time.Minute)
	const grace = 500 * time.Millisecond
	a, _ := turnProcess(t, addr, grace)
	c, bc := turnProcess(t, addr, grace)

	lk, err := a.Acquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	turnsOf := func() []string {
		var ids []string
		for f := range rdb.HGetAll(ctx, "fair:{k}:lock").Val() {
			if id, ok := strings.CutPrefix(f, "p:"); ok {
				ids = append(ids, id)
			}
		}
		return ids
	}
	child := startFairChild(t, addr, fairChildConfig{Mode: "wait", Plain: true, Key: "k"})
	pollUntil(t, 60*time.Second, "the child in line", func() bool { return len(turnsOf()) == 1 })
	got := make(chan string, 1)
	locks := make(chan *fencelock.Lock, 1)
	acquireAsync(ctx, t, c, "k", "c", got, locks)
	pollUntil(t, 30*time.Second, "process c in line", func() bool { return inLine(rdb, "k", redisbackend.ProcessID(bc)) })
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()

	released := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		waited := time.Since(released)
		if next := <-locks; next != nil {
			next.Release(ctx)
		}
		if waited < grace {
			t.Fatalf("c took the lock %v after the release, within the killed process's grace of %v", waited, grace)
		}
		t.Logf("c got the lock %v after the release (grace %v)", waited, grace)
	case <-time.After(grace + 30*time.Second): // loose, for a busy machine
		t.Fatal("the lock was not taken after the process whose turn it was had been killed")
	}
}

// A process whose turn it is hands the lock on to its own waiters at most
// TurnHoldsMax times in a row while another process is in line (one script
// run per hand-off); the next release wakes the other process instead, and
// reports that it yielded.
func TestTurnHandsOnAFewTimesThenYields(t *testing.T) {
	srv := servertest.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newBackendOf := func() *redisbackend.Backend {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b := redisbackend.New(rdb)
		redisbackend.SetTurnGrace(b, time.Minute)
		t.Cleanup(func() { b.Close(); rdb.Close() })
		return b
	}
	a, other := newBackendOf(), newBackendOf()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	// Both processes wait for the key (a plain watch each), so their
	// attempts and releases name them.
	for _, b := range []*redisbackend.Backend{a, other} {
		w, err := b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "t", Key: "k"}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
	}
	const ttl = 10 * time.Second
	if res, err := a.Acquire(ctx, acquireReq("k", "a0", "a0", ttl)); err != nil || !res.Acquired {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	if res, err := other.Acquire(ctx, acquireReq("k", "o", "o", ttl)); err != nil || res.Acquired {
		t.Fatalf("the other process's Acquire of the held lock: %+v, %v; want refused", res, err)
	}
	holder := "a0"
	for i := 1; ; i++ {
		next := acquireReq("k", "a"+string(rune('0'+i)), "a"+string(rune('0'+i)), ttl)
		rel, got, err := a.HandOff(ctx, driver.ReleaseRequest{Ref: driver.Ref{Namespace: "t", Key: "k", Token: holder}}, next)
		if err != nil || !rel.Held {
			t.Fatalf("release %d: %+v, %v", i, rel, err)
		}
		if i <= redisbackend.TurnHoldsMax {
			if !got.Acquired || rel.Yielded {
				t.Fatalf("release %d of the process's turn: %+v, hand-off %+v; want handed on", i, rel, got)
			}
			holder = next.Token
			continue
		}
		if got.Acquired || !rel.Yielded {
			t.Fatalf("release %d, after %d hand-offs: %+v, hand-off %+v; want the other process woken, and yielded", i, redisbackend.TurnHoldsMax, rel, got)
		}
		break
	}
	// The free lock keeps the line (a in it, last), whom it woke, and the
	// waited mark, so that a client of an older version that takes it
	// still publishes when it releases it.
	fields := rdb.HGetAll(ctx, "t:{k}:lock").Val()
	if fields["p:"+redisbackend.ProcessID(a)] == "" || fields["woken"] != "p:"+redisbackend.ProcessID(other) ||
		fields["waited"] != "1" || fields["owner"] != "" {
		t.Fatalf("the free lock's hash after the release that yielded: %v; want a in line, the other process woken, waited, no owner", fields)
	}
	if res, err := other.Acquire(ctx, acquireReq("k", "o", "o", ttl)); err != nil || !res.Acquired {
		t.Fatalf("the other process's Acquire on its turn: %+v, %v", res, err)
	}
	// a got in line again when it yielded: the other process's release
	// wakes it (and puts the other process, which still watches, in line
	// behind it), and a's attempt takes the lock.
	rel, err := other.Release(ctx, driver.ReleaseRequest{Ref: driver.Ref{Namespace: "t", Key: "k", Token: "o"}})
	if err != nil || !rel.Held || !rel.Yielded {
		t.Fatalf("the other process's release: %+v, %v; want released, yielding to a", rel, err)
	}
	if res, err := a.Acquire(ctx, acquireReq("k", "a9", "a9", ttl)); err != nil || !res.Acquired {
		t.Fatalf("a's Acquire on its turn again: %+v, %v", res, err)
	}
}

// Across processes, 4 processes × 4 plain workers on one key, each holding
// it for 1 ms and thinking for 1 ms: the processes take turns, so every
// worker gets about as many turns as the others, no two hold it at once,
// and the fences rise with every hand-off.
func TestPlainAcrossProcessesTakeTurns(t *testing.T) {
	srv := servertest.Redis(t)
	cfg := fairChildConfig{Mode: "work", Plain: true, Key: "shared", Workers: 4, Duration: 3 * time.Second,
		Hold: time.Millisecond, Think: time.Millisecond}
	counts := workAcrossProcesses(t, srv.Addr(), 4, cfg)
	lo, hi := slices.Min(counts), slices.Max(counts)
	if lo == 0 || float64(lo)/float64(hi) < 0.8 {
		t.Fatalf("acquisitions per worker %v: min/max %d/%d, want the processes to share turns evenly", counts, lo, hi)
	}
}
