package redisbackend_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/childtest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// fairClient is a Client on its own go-redis client of the server at addr,
// as a separate process would have.
func fairClient(t *testing.T, addr string) *fencelock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	c := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("fair"))
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c
}

// lineLength is the number of fair waiters in the line of key.
func lineLength(rdb *redis.Client, key string) int64 {
	return rdb.ZCard(context.Background(), "fair:{"+key+"}:queue").Val()
}

// Fair waiters get the lock in the order in which they joined the line,
// whichever Client (process) they are in, one wake-up per hand-off.
func TestFairOrder(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	holder := fairClient(t, srv.Addr())
	lk, err := holder.Acquire(ctx, "k", 30*time.Second, fencelock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	clients := make([]*fencelock.Client, 3)
	for i := range clients {
		clients[i] = fairClient(t, srv.Addr())
	}
	var (
		mu     sync.Mutex
		order  []int
		fences []int64
		wg     sync.WaitGroup
	)
	for i := range waiters {
		wg.Go(func() {
			l, err := clients[i%len(clients)].Acquire(ctx, "k", 30*time.Second, fencelock.WithFairness())
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			fences = append(fences, l.Fence())
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		// The next waiter starts once this one is in line.
		pollUntil(t, 30*time.Second, fmt.Sprintf("waiter %d in line", i), func() bool {
			return lineLength(rdb, "k") == int64(i+1)
		})
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(order, want) {
		t.Fatalf("order of acquisition %v, want %v (the order of joining the line)", order, want)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences %v do not strictly increase", fences)
		}
	}
	if n := lineLength(rdb, "k"); n != 0 {
		t.Fatalf("%d places left in line", n)
	}
	if n := rdb.Exists(ctx, "fair:{k}:queue", "fair:{k}:queue:ends").Val(); n != 0 {
		t.Fatalf("the line's keys outlived it (%d left)", n)
	}
}

// A fair TryAcquire does not jump the line: with a waiter in line it is
// refused even when the lock is free, and it does not join the line.
func TestFairTryAcquireRespectsLine(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := redisbackend.New(rdb)
	t.Cleanup(func() { b.Close() })

	// Place a waiter in line by hand (backend level) while the lock is held.
	held := acquireReq("k", "holder", "holder", 30*time.Second)
	held.Namespace = "fair"
	if r, err := b.AcquireInLine(ctx, held, driver.Turn{Place: driver.PlaceLease}); err != nil || !r.Acquired {
		t.Fatalf("holder: %+v %v", r, err)
	}
	waiter := acquireReq("k", "waiter", "waiter", 30*time.Second)
	waiter.Namespace = "fair"
	if r, err := b.AcquireInLine(ctx, waiter, driver.Turn{Place: time.Minute}); err != nil || r.Acquired {
		t.Fatalf("waiter: %+v %v, want refused and in line", r, err)
	}
	if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: held.Ref}); err != nil {
		t.Fatal(err)
	}

	c := fairClient(t, srv.Addr())
	_, err := c.TryAcquire(ctx, "k", 30*time.Second, fencelock.WithFairness())
	if !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with a waiter in line: %v, want ErrNotAcquired", err)
	}
	if n := lineLength(rdb, "k"); n != 1 {
		t.Fatalf("%d in line after a fair TryAcquire, want 1 (it must not join)", n)
	}
	// The waiter, first in line, takes it.
	if r, err := b.AcquireInLine(ctx, waiter, driver.Turn{Place: time.Minute}); err != nil || !r.Acquired {
		t.Fatalf("first in line: %+v %v, want acquired", r, err)
	}
	if n := lineLength(rdb, "k"); n != 0 {
		t.Fatalf("%d in line after the first took the lock", n)
	}
}

// A fair waiter that gives up leaves the line at once: the next one gets
// the lock on the release, without waiting for the leaver's place to lapse.
func TestFairGiveUpLeavesLine(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := fairClient(t, srv.Addr()), fairClient(t, srv.Addr())

	lk, err := a.Acquire(ctx, "k", 30*time.Second, fencelock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	quitter, quit := context.WithCancel(ctx)
	quitErr := make(chan error, 1)
	go func() {
		_, err := b.Acquire(quitter, "k", 30*time.Second, fencelock.WithFairness())
		quitErr <- err
	}()
	pollUntil(t, 30*time.Second, "the quitter in line", func() bool { return lineLength(rdb, "k") == 1 })
	next := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := b.Acquire(ctx, "k", 30*time.Second, fencelock.WithFairness())
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	pollUntil(t, 30*time.Second, "the next waiter in line", func() bool { return lineLength(rdb, "k") == 2 })
	quit()
	if err := <-quitErr; !errors.Is(err, fencelock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the quitter: %v, want ErrNotAcquired and context.Canceled", err)
	}
	pollUntil(t, 30*time.Second, "the quitter out of line", func() bool { return lineLength(rdb, "k") == 1 })
	released := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-next
	if l == nil {
		t.FailNow()
	}
	// The quitter's place would have held the line up for driver.PlaceLease.
	if waited := time.Since(released); waited >= driver.PlaceLease {
		t.Fatalf("the next waiter got the lock %v after the release: it waited for the quitter's place to lapse", waited)
	}
	l.Release(ctx)
}

// A fair waiter killed with SIGKILL while in line holds the line up for the
// rest of its place's lease at most: the lock is handed to the next waiter.
func TestFairKilledWaiterDoesNotBlockLine(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := fairClient(t, srv.Addr())

	lk, err := c.Acquire(ctx, "k", 30*time.Second, fencelock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	child := startFairChild(t, srv.Addr(), fairChildConfig{Mode: "wait", Key: "k"})
	pollUntil(t, 60*time.Second, "the child in line", func() bool { return lineLength(rdb, "k") == 1 })
	next := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "k", 30*time.Second, fencelock.WithFairness())
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	pollUntil(t, 30*time.Second, "the second waiter in line", func() bool { return lineLength(rdb, "k") == 2 })
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The dead child is first in line: the next waiter gets the lock once
	// the child's place lapses (driver.PlaceLease), not after the holder's
	// ttl or never. The bound is loose for a busy machine.
	select {
	case l := <-next:
		if l == nil {
			t.FailNow()
		}
		l.Release(ctx)
	case <-time.After(driver.PlaceLease + 20*time.Second):
		t.Fatal("the lock was not handed on after the waiter first in line was killed")
	}
}

// Across processes, 4 processes × 4 workers on one key, each holding it for
// 1 ms and thinking for 1 ms: the lock goes round in order, so every worker
// gets about as many turns as the others, no two hold it at once, and the
// fences rise with every hand-off.
func TestFairAcrossProcesses(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	cfg := fairChildConfig{Mode: "work", Key: "shared", Workers: 4, Duration: 3 * time.Second,
		Hold: time.Millisecond, Think: time.Millisecond}
	counts := workAcrossProcesses(t, srv.Addr(), 4, cfg)
	lo, hi := slices.Min(counts), slices.Max(counts)
	if lo == 0 || float64(lo)/float64(hi) < 0.8 {
		t.Fatalf("acquisitions per worker %v: min/max %d/%d, want the line to share turns evenly", counts, lo, hi)
	}
	if n := lineLength(rdb, "shared"); n != 0 {
		t.Fatalf("%d places left in line", n)
	}
}

// workAcrossProcesses runs cfg (Mode "work") in procs child processes at
// once, and returns the acquisitions of every worker of every process. It
// fails the test if a process failed or found a broken invariant.
func workAcrossProcesses(t *testing.T, addr string, procs int, cfg fairChildConfig) []int {
	t.Helper()
	children := make([]*exec.Cmd, procs)
	outs := make([]*bufio.Scanner, procs)
	cfg.Barrier, cfg.Processes = childtest.Barrier(), procs // they start work together
	for i := range children {
		children[i], outs[i] = startFairChildOutput(t, addr, cfg)
	}
	var counts []int
	total := 0
	for i, c := range children {
		var res fairChildResult
		for outs[i].Scan() {
			if line, ok := strings.CutPrefix(outs[i].Text(), "RESULT "); ok {
				if err := json.Unmarshal([]byte(line), &res); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := c.Wait(); err != nil {
			t.Fatalf("worker process %d: %v", i, err)
		}
		if res.Err != "" {
			t.Fatalf("worker process %d: %s", i, res.Err)
		}
		counts = append(counts, res.Counts...)
		for _, n := range res.Counts {
			total += n
		}
	}
	lo, hi := slices.Min(counts), slices.Max(counts)
	t.Logf("%d hand-offs in %v; acquisitions per worker %v (min/max %.2f)", total, cfg.Duration, counts, float64(lo)/float64(hi))
	return counts
}

// fairChildConfig tells a child process (TestFairChild) what to do.
type fairChildConfig struct {
	Mode      string // "wait": wait in line for Key forever; "work": the contended loop
	Plain     bool   // plain waiters (processes take turns), not fair ones
	Key       string
	Workers   int
	Duration  time.Duration
	Hold      time.Duration
	Think     time.Duration
	Barrier   string // all Processes start work at once (childtest.Together)
	Processes int
}

// acquireOptions are the child's options of Acquire.
func (cfg fairChildConfig) acquireOptions() []fencelock.AcquireOption {
	if cfg.Plain {
		return nil
	}
	return []fencelock.AcquireOption{fencelock.WithFairness()}
}

// fairChildResult is what a "work" child prints (one RESULT line of JSON).
type fairChildResult struct {
	Counts []int
	Err    string
}

func startFairChild(t *testing.T, addr string, cfg fairChildConfig) *exec.Cmd {
	t.Helper()
	cmd, _ := startFairChildOutput(t, addr, cfg)
	return cmd
}

func startFairChildOutput(t *testing.T, addr string, cfg fairChildConfig) (*exec.Cmd, *bufio.Scanner) {
	return childtest.Start(t, "TestFairChild", "FENCELOCK_FAIR_CHILD", addr, cfg)
}

// TestFairChild is the body of the child processes of the fair tests; it
// does nothing unless started by one.
func TestFairChild(t *testing.T) {
	var cfg fairChildConfig
	addr, ok := childtest.Spec(t, "FENCELOCK_FAIR_CHILD", &cfg)
	if !ok {
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	defer rdb.Close()
	c := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("fair"))
	defer c.Close()
	ctx := context.Background()
	switch cfg.Mode {
	case "wait":
		_, err := c.Acquire(ctx, cfg.Key, 30*time.Second, cfg.acquireOptions()...)
		t.Fatalf("the waiting child got %v; it should have been killed first", err)
	case "work":
		res := fairWork(ctx, c, rdb, cfg)
		js, _ := json.Marshal(res)
		fmt.Printf("RESULT %s\n", js)
	}
}

// fairWork runs cfg.Workers workers taking the lock in turn until
// cfg.Duration has passed since every process started. While holding, each checks that
// it is alone (a counter on the server) and that its fence is above the
// last one written (a value on the server).
func fairWork(ctx context.Context, c *fencelock.Client, rdb *redis.Client, cfg fairChildConfig) fairChildResult {
	res := fairChildResult{Counts: make([]int, cfg.Workers)}
	if err := childtest.Together(ctx, rdb, cfg.Barrier, cfg.Processes); err != nil {
		res.Err = err.Error()
		return res
	}
	end := time.Now().Add(cfg.Duration)
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		if res.Err == "" {
			res.Err = err.Error()
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() {
			for time.Now().Before(end) {
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				lk, err := c.Acquire(actx, cfg.Key, 10*time.Second, cfg.acquireOptions()...)
				if err != nil {
					cancel()
					fail(err)
					return
				}
				if n := rdb.Incr(actx, "inside").Val(); n != 1 {
					fail(fmt.Errorf("%d holders at once", n))
				}
				last, _ := strconv.ParseInt(rdb.Get(actx, "last-fence").Val(), 10, 64)
				if lk.Fence() <= last {
					fail(fmt.Errorf("fence %d after %d", lk.Fence(), last))
				}
				rdb.Set(actx, "last-fence", lk.Fence(), 0)
				time.Sleep(cfg.Hold)
				rdb.Decr(actx, "inside")
				if err := lk.Release(actx); err != nil {
					fail(err)
				}
				cancel()
				res.Counts[w]++
				time.Sleep(cfg.Think)
			}
		})
	}
	wg.Wait()
	return res
}

// A release hands the lock to the first fair waiter on the server (a grant,
// driver.Turn.Grant): the waiter, in another Client, holds it without
// an attempt of its own after the release, with a larger fence; with a ttl
// longer than driver.PlaceLease, the granted lease is extended to the ttl at
// once. Both hand-offs of the chain are grants.
func TestFairGrant(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	holder := fairClient(t, srv.Addr())
	lk, err := holder.Acquire(ctx, "g", time.Second, fencelock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	for i, ttl := range []time.Duration{time.Second, 30 * time.Second} {
		counter := &servertest.AcquireAttempts{Keys: 5, MinArgs: 7} // fair acquires
		wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		wrdb.AddHook(counter)
		waiter := fencelock.New(redisbackend.New(wrdb), fencelock.WithNamespace("fair"))
		t.Cleanup(func() { waiter.Close(); wrdb.Close() })
		got := make(chan *fencelock.Lock, 1)
		go func() {
			l, err := waiter.Acquire(ctx, "g", ttl, fencelock.WithFairness(), fencelock.WithRetry(fencelock.ConstantBackoff{Delay: time.Minute}))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			got <- l
		}()
		pollUntil(t, 30*time.Second, "the waiter in line", func() bool { return lineLength(rdb, "g") == 1 })
		// The waiter's attempts: the one that joins the line, one more once
		// it has subscribed (a release in between would go unnoticed),
		// then a place renewal every driver.PlaceLease/3. A release right
		// after the first renewal leaves the grant alone to hand the lock
		// over. (Waiting for any attempt after the line appears is not
		// enough: the hook counts an attempt when its reply arrives, so
		// the joining attempt could count as that one, and the attempt
		// after subscribing then follow the release, as it did in CI under
		// load.)
		pollUntil(t, 30*time.Second, "the waiter's first place renewal", func() bool { return counter.Load() >= 3 })
		renewed := time.Now() // just after the attempt the grant will name was sent
		// The release's one message, the grant, goes to the waiter's own
		// channel, not to the key's, which every process waiting for the
		// key subscribes to.
		sub := rdb.Subscribe(ctx, "fair:{g}:released")
		if err := sub.PSubscribe(ctx, "fair:grants:*"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		before := counter.Load()
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next := <-got
		if next == nil {
			t.FailNow()
		}
		sinceRenewal := time.Since(renewed)
		msg, err := sub.ReceiveMessage(ctx)
		sub.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(msg.Payload, "grant:"+next.Token()+":") || !strings.HasPrefix(msg.Channel, "fair:grants:") {
			t.Fatalf("hand-off %d: the release published %q on %s, want a grant to %s on the waiter's own channel", i, msg.Payload, msg.Channel, next.Token())
		}
		// Unless the machine stalled the test or the waiter until the
		// waiter's next place renewal (driver.PlaceLease/3 after the last),
		// it took the grant without an attempt of its own.
		if n := counter.Load() - before; n != 0 && sinceRenewal < driver.PlaceLease/6 {
			t.Fatalf("hand-off %d: the waiter made %d attempts after the release, want 0 (granted)", i, n)
		}
		if next.Fence() <= lk.Fence() {
			t.Fatalf("hand-off %d: granted fence %d, not above %d", i, next.Fence(), lk.Fence())
		}
		if ttl > driver.PlaceLease {
			pollUntil(t, 30*time.Second, "the granted lease extended to the ttl", func() bool {
				return rdb.PTTL(ctx, "fair:{g}:lock").Val() > driver.PlaceLease
			})
			// The server runs the extension before its reply reaches the
			// Lock: on a busy machine the local deadline moves moments
			// later, so wait for it too rather than read it at once.
			pollUntil(t, 30*time.Second, "the local deadline moved to the extended lease", func() bool {
				return time.Until(next.Deadline()) > driver.PlaceLease
			})
		}
		lk = next
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "fair:{g}:lock", "fair:{g}:queue", "fair:{g}:queue:ends").Val(); n != 0 {
		t.Fatalf("%d keys of the lock and its line left after the last release", n)
	}
}
