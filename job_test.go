package fencelock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/childtest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// Run-once jobs, deterministically: three instances whose
// schedulers fire 0, 150 and 300ms late run a 1s job for 10 ticks; each
// tick runs exactly once, on the first instance to fire, with fences that
// increase from run to run; the job stays taken for LockAtLeast after a
// 10ms run, and is free at once after it.
func TestJobOncePerTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		job := fencelock.Job{Name: "sweep", Period: time.Second, LockAtLeast: 500 * time.Millisecond, LockAtMost: 10 * time.Second}
		base := time.Now().Truncate(time.Second).Add(time.Second)
		type run struct {
			tick     int
			instance string
			fence    int64
		}
		var mu sync.Mutex
		var runs []run
		var wg sync.WaitGroup
		for i, late := range []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond} {
			name := string(rune('a' + i))
			c := e.client(name)
			wg.Go(func() {
				for tick := range 10 {
					scheduled := base.Add(time.Duration(tick) * time.Second)
					time.Sleep(time.Until(scheduled.Add(late)))
					ran, err := c.RunJob(context.Background(), job, scheduled, func(ctx context.Context, lk *fencelock.Lock) error {
						mu.Lock()
						runs = append(runs, run{tick, name, lk.Fence()})
						mu.Unlock()
						time.Sleep(10 * time.Millisecond)
						return nil
					})
					if err != nil {
						t.Errorf("instance %s tick %d: ran %v, %v", name, tick, ran, err)
					}
				}
			})
		}
		// The hold outlives the 10ms run until LockAtLeast, then lapses.
		time.Sleep(time.Until(base.Add(499 * time.Millisecond)))
		if s := e.state("job:sweep"); !s.Held() || !strings.HasPrefix(s.Owner, "job:sweep@") {
			t.Errorf("at 499ms the job is %+v, want held by the first tick's owner", s)
		}
		time.Sleep(time.Millisecond)
		if s := e.state("job:sweep"); s.Held() {
			t.Errorf("at 500ms the job is still held: %+v", s)
		}
		wg.Wait()
		if len(runs) != 10 {
			t.Fatalf("%d runs in 10 ticks: %+v", len(runs), runs)
		}
		for i, r := range runs {
			if r.tick != i || r.instance != "a" {
				t.Errorf("run %d: %+v, want tick %d on instance a (the first to fire)", i, r, i)
			}
			if i > 0 && r.fence <= runs[i-1].fence {
				t.Errorf("run %d: fence %d not above %d", i, r.fence, runs[i-1].fence)
			}
		}
	})
}

// With LockAtLeast 0 the job is free as soon as the run ends; a run that
// takes longer than LockAtLeast releases at its end.
func TestJobReleasedAfterLongRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		for _, tc := range []struct {
			least, run time.Duration
		}{{0, 100 * time.Millisecond}, {200 * time.Millisecond, 300 * time.Millisecond}} {
			job := fencelock.Job{Name: "j", LockAtLeast: tc.least, LockAtMost: time.Minute}
			start := time.Now()
			ran, err := c.RunJob(context.Background(), job, start, func(ctx context.Context, _ *fencelock.Lock) error {
				time.Sleep(tc.run)
				return nil
			})
			if !ran || err != nil {
				t.Fatalf("%+v: ran %v, %v", tc, ran, err)
			}
			if s := e.state("job:j"); s.Held() || time.Since(start) != tc.run {
				t.Errorf("%+v: after the run (%v) the job is %+v, want free at once", tc, time.Since(start), s)
			}
		}
	})
}

// A run longer than the period: the next tick's attempts wait for it (runs
// never overlap) and the next tick runs once, when it ends; a tick whose
// period passes while the earlier run still holds the job is skipped with
// ErrNotAcquired.
func TestJobLongRunDelaysNextTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		a, b := e.client("a"), e.client("b")
		job := fencelock.Job{Name: "slow", Period: time.Second, LockAtLeast: 100 * time.Millisecond, LockAtMost: 10 * time.Second}
		base := time.Now().Truncate(time.Second).Add(time.Second)
		time.Sleep(time.Until(base))

		var first, second, third atomic32
		go a.RunJob(context.Background(), job, base, func(ctx context.Context, _ *fencelock.Lock) error {
			first.set(e.now())
			time.Sleep(1500 * time.Millisecond)
			return nil
		})
		time.Sleep(time.Second)
		var wg sync.WaitGroup
		for _, c := range []*fencelock.Client{a, b} {
			wg.Go(func() {
				c.RunJob(context.Background(), job, base.Add(time.Second), func(ctx context.Context, _ *fencelock.Lock) error {
					second.set(e.now())
					time.Sleep(1600 * time.Millisecond) // past the end of the third tick's period
					return nil
				})
			})
		}
		time.Sleep(time.Until(base.Add(2 * time.Second)))
		ran, err := b.RunJob(context.Background(), job, base.Add(2*time.Second), func(context.Context, *fencelock.Lock) error {
			third.set(e.now())
			return nil
		})
		if ran || !errors.Is(err, fencelock.ErrNotAcquired) || third.n != 0 {
			t.Errorf("third tick, whose period ended during the second run: ran %v, %v; want skipped with ErrNotAcquired", ran, err)
		}
		if at := e.now(); at != 4*time.Second {
			t.Errorf("the third tick gave up at %v, want at the end of its period (4s)", at)
		}
		wg.Wait()
		if got, want := second.get(), first.get()+1500*time.Millisecond; second.n != 1 || got != want {
			t.Errorf("second tick ran %d times, at %v; want once at %v (when the first run ended)", second.n, got, want)
		}
	})
}

// atomic32 records when something happened and how often (a test helper).
type atomic32 struct {
	mu sync.Mutex
	n  int
	at time.Duration
}

func (a *atomic32) set(at time.Duration) { a.mu.Lock(); a.n++; a.at = at; a.mu.Unlock() }
func (a *atomic32) get() time.Duration   { a.mu.Lock(); defer a.mu.Unlock(); return a.at }

func TestJobInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ok := fencelock.Job{Name: "j", LockAtLeast: time.Second, LockAtMost: time.Minute}
		fn := func(context.Context, *fencelock.Lock) error { return nil }
		for _, tc := range []struct {
			name string
			job  fencelock.Job
			at   time.Time
			fn   func(context.Context, *fencelock.Lock) error
		}{
			{"Job.Name", fencelock.Job{LockAtMost: time.Minute}, time.Now(), fn},
			{"Job.LockAtMost", fencelock.Job{Name: "j"}, time.Now(), fn},
			{"Job.LockAtLeast", fencelock.Job{Name: "j", LockAtLeast: 2 * time.Minute, LockAtMost: time.Minute}, time.Now(), fn},
			{"Job.Period", fencelock.Job{Name: "j", Period: -1, LockAtMost: time.Minute}, time.Now(), fn},
			{"scheduled time", ok, time.Time{}, fn},
			{"fn", ok, time.Now(), nil},
		} {
			ran, err := c.RunJob(context.Background(), tc.job, tc.at, tc.fn)
			if ran || !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.name) {
				t.Errorf("%s: ran %v, %v; want ErrInvalidArgument naming it", tc.name, ran, err)
			}
		}
	})
}

// Racing schedulers against a real redis-server: 3 processes (this test
// binary re-executed) each run a job every second for 15 ticks, their
// schedulers 0, 20 and 40ms late and jittered by up to 60ms, so that
// each tick's attempts race within 100ms; the server counts exactly one
// run per tick.
func TestJobAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	ctx := ctxTimeout(t, 60*time.Second)
	const ticks = 15
	start := time.Now().Truncate(time.Second).Add(3 * time.Second) // time for the children to start, on a busy machine too
	var children []*exec.Cmd
	var outs []*bufio.Scanner
	for i := range 3 {
		cmd, out := startJobChild(t, srv.Addr(), jobChildConfig{
			Mode: "ticks", Start: start, Ticks: ticks, Late: time.Duration(i) * 20 * time.Millisecond,
		})
		children, outs = append(children, cmd), append(outs, out)
	}
	total := 0
	for i, out := range outs {
		var ran int
		for out.Scan() {
			if n, ok := strings.CutPrefix(out.Text(), "RAN "); ok {
				ran, _ = strconv.Atoi(n)
			}
			if strings.HasPrefix(out.Text(), "SKIP ") {
				t.Logf("process %d: %s", i, out.Text())
			}
		}
		if err := children[i].Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		t.Logf("process %d ran %d ticks", i, ran)
		total += ran
	}
	counts := rdb.HGetAll(ctx, "job-runs").Val()
	for tick := range ticks {
		if n := counts[strconv.Itoa(tick)]; n != "1" {
			t.Errorf("tick %d ran %q times, want 1", tick, n)
		}
	}
	if len(counts) != ticks || total != ticks {
		t.Errorf("%d ticks ran (%d runs reported), want %d: %v", len(counts), total, ticks, counts)
	}
}

// A run whose process is killed -9 frees the job after LockAtMost (3s): not
// before (the dead run's hold is there at once after the kill), and not
// much after.
func TestJobKilledRunFreedAfterLockAtMost(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	cmd, out := startJobChild(t, srv.Addr(), jobChildConfig{Mode: "hang"})
	for out.Scan() && out.Text() != "RUNNING" {
	}
	running := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	info, err := c.Inspect(ctx, "job:nightly")
	if err != nil || !info.Held || info.TTL > 3*time.Second || !strings.HasPrefix(info.Owner, "job:nightly@") {
		t.Fatalf("after the kill: %+v, %v; want the dead run's hold, with at most 3s left", info, err)
	}
	job := fencelock.Job{Name: "nightly", LockAtMost: 3 * time.Second}
	next := time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC) // the next tick
	for {
		ran, err := c.RunJob(ctx, job, next, func(context.Context, *fencelock.Lock) error { return nil })
		if ran {
			break
		}
		if !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("RunJob while the dead run holds the job: ran %v, %v", ran, err)
		}
		if time.Since(running) > 10*time.Second {
			t.Fatal("the job is still taken 10s after its run was killed (LockAtMost is 3s)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the job ran again %v after the killed run was seen running", time.Since(running).Round(time.Millisecond))
}

// jobChildConfig tells a child process (TestJobChild) what to do.
type jobChildConfig struct {
	Mode  string // "ticks": run the job every second; "hang": start a run that never ends
	Start time.Time
	Ticks int
	Late  time.Duration // how late this process's scheduler fires, besides jitter
}

func startJobChild(t *testing.T, addr string, cfg jobChildConfig) (*exec.Cmd, *bufio.Scanner) {
	return childtest.Start(t, "TestJobChild", "FENCELOCK_JOB_CHILD", addr, cfg)
}

// TestJobChild is the body of the child processes of the job tests; it does
// nothing unless started by one.
func TestJobChild(t *testing.T) {
	var cfg jobChildConfig
	addr, ok := childtest.Spec(t, "FENCELOCK_JOB_CHILD", &cfg)
	if !ok {
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := fencelock.New(redisbackend.New(rdb))
	defer c.Close()
	ctx := context.Background()
	switch cfg.Mode {
	case "hang":
		job := fencelock.Job{Name: "nightly", LockAtMost: 3 * time.Second}
		c.RunJob(ctx, job, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), func(context.Context, *fencelock.Lock) error {
			fmt.Println("RUNNING")
			select {} // killed here
		})
	case "ticks":
		// LockAtLeast covers the 100ms spread of the schedulers, and CPU
		// starvation of a busy test machine up to 700ms more.
		job := fencelock.Job{Name: "every-second", Period: time.Second, LockAtLeast: 800 * time.Millisecond, LockAtMost: 10 * time.Second}
		ran := 0
		for tick := range cfg.Ticks {
			scheduled := cfg.Start.Add(time.Duration(tick) * time.Second)
			jitter := time.Duration(rand.N(60)) * time.Millisecond
			time.Sleep(time.Until(scheduled.Add(cfg.Late + jitter)))
			ok, err := c.RunJob(ctx, job, scheduled, func(ctx context.Context, _ *fencelock.Lock) error {
				time.Sleep(time.Duration(rand.N(40)) * time.Millisecond) // a fast job
				return rdb.HIncrBy(ctx, "job-runs", strconv.Itoa(tick), 1).Err()
			})
			switch {
			case errors.Is(err, fencelock.ErrNotAcquired):
				fmt.Printf("SKIP tick %d: %v\n", tick, err) // the parent finds the tick without a run
			case err != nil:
				t.Errorf("tick %d: %v", tick, err)
			}
			if ok {
				ran++
			}
		}
		fmt.Printf("RAN %d\n", ran)
	}
}

// Attempts for one tick at the same instant: exactly one runs, whichever
// reaches the store first; the others find the tick claimed and take
// nothing.
func TestJobSimultaneousAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		job := fencelock.Job{Name: "same-instant", Period: time.Minute, LockAtLeast: time.Second, LockAtMost: time.Minute}
		tick := time.Now()
		var runs, skips atomic32
		var wg sync.WaitGroup
		for i := range 5 {
			c := e.client(fmt.Sprint("c", i))
			wg.Go(func() {
				ran, err := c.RunJob(context.Background(), job, tick, func(context.Context, *fencelock.Lock) error {
					runs.set(e.now())
					return nil
				})
				if err != nil {
					t.Errorf("RunJob: %v", err)
				}
				if !ran {
					skips.set(e.now())
				}
			})
		}
		wg.Wait()
		if runs.n != 1 || skips.n != 4 {
			t.Errorf("%d runs and %d skips of one tick by 5 instances, want 1 and 4", runs.n, skips.n)
		}
		if s := e.state("job:same-instant"); len(s.Holds) != 1 {
			t.Errorf("holds left: %+v, want only the run's, until LockAtLeast", s)
		}
	})
}

// A run that outlasts LockAtMost has its context cancelled (cause ErrLost)
// before the lease ends; RunJob reports the loss, and the job is free.
func TestJobRunOutlastsLockAtMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		job := fencelock.Job{Name: "overrun", LockAtMost: 2 * time.Second}
		var stoppedAt time.Duration
		ran, err := c.RunJob(context.Background(), job, time.Now(), func(ctx context.Context, _ *fencelock.Lock) error {
			<-ctx.Done()
			stoppedAt = e.now()
			return context.Cause(ctx)
		})
		if !ran || !errors.Is(err, fencelock.ErrLost) {
			t.Errorf("ran %v, %v; want ran and ErrLost", ran, err)
		}
		if stoppedAt != 1800*time.Millisecond {
			t.Errorf("run told to stop at %v, want 1.8s (LockAtMost less the 10%% margin)", stoppedAt)
		}
		synctest.Wait()
		if e.state("job:overrun").Held() {
			t.Error("the job is still held after the lost run")
		}
	})
}
