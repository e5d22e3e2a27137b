package fencelock_test

// Semaphores and read-write locks against a real redis-server: the bounds
// hold across processes (worker processes re-exec this test binary, see
// TestHoldsChild), and a holder killed with SIGKILL stops counting when its
// lease ends.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/childtest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// holdsChildConfig tells a child process (TestHoldsChild) what to do.
type holdsChildConfig struct {
	// Mode: "permit", "read" or "write" take one hold (Key) with a 2s
	// lease, renewed every 500ms ("write": every third of the lease), print
	// "TOKEN <token>" and "HELD <fence>" and wait to be killed; "semaphore"
	// and "rwlock" run Workers workers contending for Key for Duration,
	// once all Processes have started (childtest.Together at Barrier).
	Mode      string
	Key       string
	Permits   int
	Workers   int // rwlock: every Writers-th worker writes, the others read
	Writers   int
	Duration  time.Duration
	Hold      time.Duration
	Barrier   string
	Processes int
}

// holdsChildResult is what a worker child prints (one RESULT line of JSON).
type holdsChildResult struct {
	Acquired int       // holds taken (semaphore: permits; rwlock: reads)
	Writes   int       // rwlock: write holds taken
	Fences   [][]int64 // per worker, its fences in the order it got them
	Err      string
}

// startHoldsChild starts a child process with cfg and returns it with a
// scanner of its output; it is killed at cleanup.
func startHoldsChild(t *testing.T, addr string, cfg holdsChildConfig) (*exec.Cmd, *bufio.Scanner) {
	return childtest.Start(t, "TestHoldsChild", "FENCELOCK_HOLDS_CHILD", addr, cfg)
}

// childLine waits for the child's line with prefix and returns the rest.
func childLine(t *testing.T, out *bufio.Scanner, prefix string) string {
	t.Helper()
	for out.Scan() {
		if rest, ok := strings.CutPrefix(out.Text(), prefix); ok {
			return rest
		}
	}
	t.Fatalf("the child ended without printing %q", prefix)
	return ""
}

// TestHoldsChild is the body of the child processes of the tests in this
// file; it does nothing unless started by one.
func TestHoldsChild(t *testing.T) {
	var cfg holdsChildConfig
	addr, ok := childtest.Spec(t, "FENCELOCK_HOLDS_CHILD", &cfg)
	if !ok {
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	defer rdb.Close()
	c := fencelock.New(redisbackend.New(rdb))
	defer c.Close()
	ctx := context.Background()
	switch cfg.Mode {
	case "permit", "read", "write":
		var lk *fencelock.Lock
		var err error
		switch cfg.Mode {
		case "permit":
			lk, err = c.Semaphore(cfg.Key, cfg.Permits).TryAcquire(ctx, 2*time.Second, fencelock.WithAutoRenew(500*time.Millisecond))
		case "read":
			lk, err = c.RWLock(cfg.Key).TryAcquireRead(ctx, 2*time.Second, fencelock.WithAutoRenew(500*time.Millisecond))
		default:
			lk, err = c.RWLock(cfg.Key).TryAcquireWrite(ctx, 2*time.Second, fencelock.WithAutoRenew(2*time.Second/3))
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("TOKEN %s\nHELD %d\n", lk.Token(), lk.Fence())
		<-lk.Done()
		t.Fatalf("the holding child lost its hold: %v", lk.Err())
	case "semaphore", "rwlock":
		res := holdsWork(ctx, c, rdb, cfg)
		js, _ := json.Marshal(res)
		fmt.Printf("RESULT %s\n", js)
	}
}

// enterScript counts a holder in (KEYS[1]) and keeps the largest count seen
// (KEYS[2]); it returns the count and the other side's count (KEYS[3]).
var enterScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], n)
end
return {n, tonumber(redis.call('GET', KEYS[3]) or '0')}
`)

// holdsWork runs cfg.Workers workers taking holds of cfg.Key until
// cfg.Duration has passed since every process started. Each counts itself in on the
// server while it holds, and fails if the count shows more holders than
// allowed: for a semaphore, more than Permits; for a read-write lock, a
// writer beside anyone, or a reader beside a writer.
func holdsWork(ctx context.Context, c *fencelock.Client, rdb *redis.Client, cfg holdsChildConfig) holdsChildResult {
	var res holdsChildResult
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
	sem := c.Semaphore(cfg.Key, cfg.Permits)
	rw := c.RWLock(cfg.Key)
	fences := make([][]int64, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		writer := cfg.Mode == "rwlock" && w%cfg.Writers == 0
		wg.Go(func() {
			for time.Now().Before(end) {
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				var lk *fencelock.Lock
				var err error
				var self, other string
				switch {
				case cfg.Mode == "semaphore":
					lk, err = sem.Acquire(actx, 10*time.Second)
					self, other = "inside", "none"
				case writer:
					lk, err = rw.AcquireWrite(actx, 10*time.Second)
					self, other = "writers", "readers"
				default:
					lk, err = rw.AcquireRead(actx, 10*time.Second)
					self, other = "readers", "writers"
				}
				if err != nil {
					cancel()
					fail(err)
					return
				}
				counts, err := enterScript.Run(actx, rdb, []string{self, "max-" + self, other}).Int64Slice()
				switch {
				case err != nil:
					fail(err)
				case cfg.Mode == "semaphore" && counts[0] > int64(cfg.Permits):
					fail(fmt.Errorf("%d permit holders at once, of %d permits", counts[0], cfg.Permits))
				case writer && (counts[0] != 1 || counts[1] != 0):
					fail(fmt.Errorf("a writer beside %d writers and %d readers", counts[0]-1, counts[1]))
				case cfg.Mode == "rwlock" && !writer && counts[1] != 0:
					fail(fmt.Errorf("a reader beside %d writers", counts[1]))
				}
				fences[w] = append(fences[w], lk.Fence())
				time.Sleep(cfg.Hold)
				rdb.Decr(actx, self)
				if err := lk.Release(actx); err != nil {
					fail(err)
				}
				cancel()
				mu.Lock()
				if writer {
					res.Writes++
				} else {
					res.Acquired++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.Fences = fences
	return res
}

// runHoldsWorkers runs procs worker processes with cfg and returns their
// results, failing the test if any reported an error.
func runHoldsWorkers(t *testing.T, addr string, procs int, cfg holdsChildConfig) []holdsChildResult {
	t.Helper()
	cfg.Barrier, cfg.Processes = childtest.Barrier(), procs // they start work together
	type child struct {
		cmd *exec.Cmd
		out *bufio.Scanner
	}
	children := make([]child, procs)
	for i := range children {
		children[i].cmd, children[i].out = startHoldsChild(t, addr, cfg)
	}
	results := make([]holdsChildResult, procs)
	for i, ch := range children {
		if err := json.Unmarshal([]byte(childLine(t, ch.out, "RESULT ")), &results[i]); err != nil {
			t.Fatal(err)
		}
		if err := ch.cmd.Wait(); err != nil {
			t.Fatalf("worker process %d: %v", i, err)
		}
		if results[i].Err != "" {
			t.Fatalf("worker process %d: %s", i, results[i].Err)
		}
	}
	return results
}

// checkFences fails unless every fence of every result is unique and each
// worker's fences increase; it returns how many there are.
func checkFences(t *testing.T, results []holdsChildResult) int {
	t.Helper()
	seen := map[int64]bool{}
	for _, r := range results {
		for _, worker := range r.Fences {
			for i, f := range worker {
				if seen[f] {
					t.Fatalf("fence %d handed out twice", f)
				}
				seen[f] = true
				if i > 0 && f <= worker[i-1] {
					t.Fatalf("a worker got fence %d after %d", f, worker[i-1])
				}
			}
		}
	}
	return len(seen)
}

// Never more than N holders of a semaphore's permits, counted on the server
// by 12 workers in 3 processes; every permit's fence is unique, and each
// worker's fences increase.
func TestSemaphoreBoundAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	const permits = 3
	results := runHoldsWorkers(t, srv.Addr(), 3, holdsChildConfig{
		Mode: "semaphore", Key: "pool", Permits: permits, Workers: 4, Duration: 3 * time.Second, Hold: 2 * time.Millisecond})
	n := checkFences(t, results)
	total := 0
	for _, r := range results {
		total += r.Acquired
	}
	peak, _ := rdb.Get(context.Background(), "max-inside").Int()
	t.Logf("%d permits taken by 12 workers in 3 processes; at most %d held at once (of %d)", total, peak, permits)
	if n != total || total == 0 {
		t.Fatalf("%d fences for %d permits", n, total)
	}
	if peak > permits {
		t.Fatalf("%d permit holders at once, of %d", peak, permits)
	}
	if left := rdb.ZCard(context.Background(), "lock:{pool}:sem").Val(); left != 0 {
		t.Fatalf("%d permits left on the server after every worker released", left)
	}
}

// No writer overlaps any reader or another writer, counted on the server by
// 12 workers (3 writers) in 3 processes; with writer preference, the
// writers get the lock although readers keep it busy.
func TestRWLockExclusionAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	results := runHoldsWorkers(t, srv.Addr(), 3, holdsChildConfig{
		Mode: "rwlock", Key: "doc", Workers: 4, Writers: 4, Duration: 3 * time.Second, Hold: 2 * time.Millisecond})
	checkFences(t, results)
	reads, writes := 0, 0
	for _, r := range results {
		reads += r.Acquired
		writes += r.Writes
	}
	ctx := context.Background()
	maxReaders, _ := rdb.Get(ctx, "max-readers").Int()
	maxWriters, _ := rdb.Get(ctx, "max-writers").Int()
	t.Logf("%d reads, %d writes by 9 readers and 3 writers in 3 processes; at most %d readers and %d writers at once",
		reads, writes, maxReaders, maxWriters)
	if writes == 0 || reads == 0 {
		t.Fatalf("%d reads and %d writes, want both sides to get the lock", reads, writes)
	}
	if maxWriters > 1 {
		t.Fatalf("%d writers at once", maxWriters)
	}
}

// A permit holder killed with SIGKILL keeps its permit until its lease
// ends, and no longer: a waiter then takes it, with a larger fence.
func TestSemaphoreKilledHolderReclaimed(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, time.Minute)
	cmd, out := startHoldsChild(t, srv.Addr(), holdsChildConfig{Mode: "permit", Key: "pool", Permits: 1})
	childToken := childLine(t, out, "TOKEN ")
	childFence, _ := strconv.ParseInt(childLine(t, out, "HELD "), 10, 64)
	sem := c.Semaphore("pool", 1)
	if _, err := sem.TryAcquire(ctx, 10*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while the child holds the only permit: %v, want ErrNotAcquired", err)
	}
	// Past the end of the lease the child had then, by the server's clock:
	// the child renews it.
	score, err := rdb.ZScore(ctx, "lock:{pool}:sem", childToken).Result()
	if err != nil {
		t.Fatalf("the child's permit: %v", err)
	}
	firstEnd := time.UnixMilli(int64(score)) // the lease's end, in ms of the server's clock
	waitUntil(t, 30*time.Second, "the server's clock past the child's first lease", func() bool { return serverNow(t, ctx, rdb).After(firstEnd) })
	if _, err := sem.TryAcquire(ctx, 10*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire after the child held for longer than its lease: %v, want ErrNotAcquired (renewed)", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	lk, err := sem.Acquire(ctx, 10*time.Second, fencelock.WithWait(30*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	t.Logf("permit of the killed holder (2s lease) taken %v after the kill", time.Since(killed).Round(time.Millisecond))
	if lk.Fence() <= childFence {
		t.Fatalf("fence %d after the killed holder's %d, want larger", lk.Fence(), childFence)
	}
}

// A reader killed with SIGKILL blocks the writer until its lease ends, and
// no longer.
func TestRWLockKilledReaderFreesWriter(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, time.Minute)
	cmd, out := startHoldsChild(t, srv.Addr(), holdsChildConfig{Mode: "read", Key: "doc"})
	childFence, _ := strconv.ParseInt(childLine(t, out, "HELD "), 10, 64)
	rw := c.RWLock("doc")
	if _, err := rw.TryAcquireWrite(ctx, 10*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquireWrite while the child reads: %v, want ErrNotAcquired", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	w, err := rw.AcquireWrite(ctx, 10*time.Second, fencelock.WithWait(30*time.Second))
	if err != nil {
		t.Fatalf("AcquireWrite after the reader was killed: %v", err)
	}
	t.Logf("write lock taken %v after the reader (2s lease) was killed", time.Since(killed).Round(time.Millisecond))
	if w.Fence() <= childFence {
		t.Fatalf("writer's fence %d after the reader's %d, want larger", w.Fence(), childFence)
	}
}

// A writer killed with SIGKILL keeps readers out until its lease ends, and
// no longer, however hard other readers poll meanwhile: once the server's
// clock is past the writer's lease, a reader's single attempt gets in, and
// a reader that waited (keeping its place alive, as waiting readers do)
// gets in within one place lease of it (driver.PlaceLease: it makes an attempt
// at least every third of that, and at the lease's end). The times are
// the server's, read from the writer's hold and TIME, so that a busy
// machine delays only the reader's own attempts, which have more than a
// second to spare.
func TestRWLockKilledWriterLetsReadersIn(t *testing.T) {
	for _, poll := range []bool{false, true} {
		name := "waiting-reader"
		if poll {
			name = "with-a-polling-reader"
		}
		t.Run(name, func(t *testing.T) {
			srv, rdb := startRedis(t)
			waiting := make(chan struct{}, 1)
			c := newClient(t, rdb, fencelock.WithHooks(fencelock.Hooks{
				WaitStart: func(context.Context, fencelock.WaitEvent) {
					select {
					case waiting <- struct{}{}:
					default:
					}
				},
			}))
			other := newClient(t, rdb)
			ctx := ctxTimeout(t, time.Minute)
			cmd, out := startHoldsChild(t, srv.Addr(), holdsChildConfig{Mode: "write", Key: "doc"})
			writerToken := childLine(t, out, "TOKEN ")
			writerFence, _ := strconv.ParseInt(childLine(t, out, "HELD "), 10, 64)

			type result struct {
				lk  *fencelock.Lock
				err error
			}
			reader := make(chan result, 1)
			go func() {
				lk, err := c.RWLock("doc").AcquireRead(ctx, 10*time.Second, fencelock.WithWait(45*time.Second))
				reader <- result{lk, err}
			}()
			select {
			case <-waiting:
			case <-time.After(10 * time.Second):
				t.Fatal("the reader did not start waiting for the child's write hold")
			}
			pollerDone := make(chan error, 1)
			if poll {
				go func() {
					every := time.NewTicker(5 * time.Millisecond) // the reader's polling interval
					defer every.Stop()
					for ; ; <-every.C {
						lk, err := other.RWLock("doc").TryAcquireRead(ctx, 10*time.Second)
						switch {
						case err == nil:
							lk.Release(ctx)
							pollerDone <- nil
							return
						case !errors.Is(err, fencelock.ErrNotAcquired):
							pollerDone <- fmt.Errorf("a polling reader's attempt: %w", err)
							return
						}
					}
				}()
			}

			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			// The writer's lease end, by the server's clock (ms): its
			// score in the holds set, which the child renewed last.
			holds := "lock:{doc}:rw"
			end, err := rdb.ZScore(ctx, holds, writerToken).Result()
			if err != nil {
				t.Fatalf("the killed writer's hold: %v (its lease is 2s, read at once)", err)
			}
			writerEnd := time.UnixMilli(int64(end))

			if !poll {
				// Once the writer's lease is over by the server's clock, a
				// single attempt gets in (beside the waiting reader, if it
				// is in already).
				waitUntil(t, 30*time.Second, "the writer's lease over by the server's clock", func() bool { return serverNow(t, ctx, rdb).After(writerEnd) })
				lk, err := other.RWLock("doc").TryAcquireRead(ctx, 10*time.Second)
				if err != nil {
					t.Fatalf("a reader's single attempt after the writer's lease ended: %v", err)
				}
				lk.Release(ctx)
			}
			var got result
			select {
			case got = <-reader:
			case <-time.After(30 * time.Second):
				t.Fatal("the waiting reader did not get in within 30s of the writer's kill (its lease was 2s)")
			}
			in := serverNow(t, ctx, rdb)
			if got.err != nil {
				t.Fatalf("the waiting reader: %v", got.err)
			}
			defer got.lk.Release(ctx)
			late := in.Sub(writerEnd)
			t.Logf("the waiting reader got in %v after the kill, %v after the writer's lease ended (server clock)",
				time.Since(killed).Round(time.Millisecond), late.Round(time.Millisecond))
			if got.lk.Fence() <= writerFence {
				t.Errorf("reader's fence %d after the writer's %d, want larger", got.lk.Fence(), writerFence)
			}
			if late > driver.PlaceLease {
				t.Errorf("the waiting reader got in %v after the writer's lease ended, want within one place lease (%v)", late, driver.PlaceLease)
			}
			if poll {
				select {
				case err := <-pollerDone:
					if err != nil {
						t.Error(err)
					}
				case <-time.After(10 * time.Second):
					t.Error("the polling reader did not get in within 10s of the waiting one")
				}
			}
		})
	}
}

// A waiting writer keeps new readers out (its intent is on the server),
// gets the lock when the last reader leaves, and readers that waited behind
// it get theirs when it releases.
func TestRWLockWriterPreference(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	c1, c2 := newClient(t, rdb), newClient(t, rdb) // as two processes
	ctx := ctxTimeout(t, time.Minute)
	rw1, rw2 := c1.RWLock("doc"), c2.RWLock("doc")
	reader, err := rw1.TryAcquireRead(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *fencelock.Lock
		err error
	}
	writer := make(chan result, 1)
	go func() {
		lk, err := rw2.AcquireWrite(ctx, 30*time.Second)
		writer <- result{lk, err}
	}()
	// Once the writer's first attempt is refused, its intent refuses readers.
	waitUntil(t, 30*time.Second, "new readers refused once a writer waits", func() bool {
		lk, err := rw1.TryAcquireRead(ctx, 30*time.Second)
		if errors.Is(err, fencelock.ErrNotAcquired) {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		lk.Release(ctx)
		return false
	})
	readers := make(chan result, 1)
	go func() {
		lk, err := rw1.AcquireRead(ctx, 30*time.Second)
		readers <- result{lk, err}
	}()
	// Past the end of the intent's first lease, by the server's clock: the
	// writer renews it (its attempts do), and the readers still wait.
	intents, err := rdb.ZRangeWithScores(ctx, "lock:{doc}:rw:writers", 0, -1).Result()
	if err != nil || len(intents) != 1 {
		t.Fatalf("the waiting writer's intent: %v %v, want one", intents, err)
	}
	intentEnd := time.UnixMilli(int64(intents[0].Score)) // the place's end, in ms of the server's clock
	waitUntil(t, 30*time.Second, "the server's clock past the writer's first intent", func() bool { return serverNow(t, ctx, rdb).After(intentEnd) })
	select {
	case r := <-writer:
		t.Fatalf("the writer got %v while a reader held the lock", r.err)
	case r := <-readers:
		t.Fatalf("a new reader got %v while a writer waited", r.err)
	default:
	}
	if err := reader.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-writer
	if w.err != nil {
		t.Fatalf("the writer after the reader left: %v", w.err)
	}
	select {
	case r := <-readers:
		t.Fatalf("a reader got %v while the writer held the lock", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	w.lk.Release(ctx)
	r := <-readers
	if r.err != nil {
		t.Fatalf("the waiting reader after the writer left: %v", r.err)
	}
	if !(reader.Fence() < w.lk.Fence() && w.lk.Fence() < r.lk.Fence()) {
		t.Fatalf("fences reader %d, writer %d, reader %d: want increasing", reader.Fence(), w.lk.Fence(), r.lk.Fence())
	}
}

// Permits and read holds are renewed by the lease keeper against the real
// server, and lost with ErrLost when the server no longer has them.
func TestHoldsRenewedAndLost(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, time.Minute)
	// A 3s lease renewed every second: at 1s and 300ms, a renewal missed
	// its 100ms margin on a starved machine (load 15).
	const ttl, every = 3 * time.Second, time.Second
	permit, err := c.Semaphore("pool", 2).TryAcquire(ctx, ttl, fencelock.WithAutoRenew(every))
	if err != nil {
		t.Fatal(err)
	}
	reader, err := c.RWLock("doc").TryAcquireRead(ctx, ttl, fencelock.WithAutoRenew(every))
	if err != nil {
		t.Fatal(err)
	}
	// Past the end of the leases they were granted, by the server's clock:
	// only renewals keep them.
	var end time.Time
	for key, lk := range map[string]*fencelock.Lock{"lock:{pool}:sem": permit, "lock:{doc}:rw": reader} {
		score, err := rdb.ZScore(ctx, key, lk.Token()).Result()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if e := time.UnixMilli(int64(score)); e.After(end) { // ms of the server's clock
			end = e
		}
	}
	waitUntil(t, 30*time.Second, "the server's clock past the first leases", func() bool { return serverNow(t, ctx, rdb).After(end) })
	for name, lk := range map[string]*fencelock.Lock{"permit": permit, "reader": reader} {
		if err := lk.Err(); err != nil {
			t.Fatalf("%s past its first lease, renewed: %v", name, err)
		}
		if got, err := lk.TTL(ctx); err != nil || got <= 0 || got > ttl {
			t.Fatalf("%s TTL = %v, %v; want (0, %v]", name, got, err, ttl)
		}
	}
	if err := permit.Refresh(ctx, 3*ttl); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if got, _ := permit.TTL(ctx); got <= ttl {
		t.Fatalf("permit TTL after Refresh(%v) = %v", 3*ttl, got)
	}
	// An operator deletes the keys: the next renewals find the holds gone.
	rdb.Del(ctx, "lock:{pool}:sem", "lock:{doc}:rw")
	waitDone(t, permit.Done(), 10*time.Second, "permit lost")
	waitDone(t, reader.Done(), 10*time.Second, "reader lost")
	if !errors.Is(permit.Err(), fencelock.ErrLost) || !errors.Is(reader.Err(), fencelock.ErrLost) {
		t.Fatalf("Err = %v, %v; want ErrLost", permit.Err(), reader.Err())
	}
}

// serverNow returns the time by the Redis server's clock.
func serverNow(t *testing.T, ctx context.Context, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}
