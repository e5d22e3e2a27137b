package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// A tick runs at most once, whatever the delay of the instances that ask
// for it: the tick's identity is claimed with the run's acquisition, so
// an instance that fires after the run's hold is gone (LockAtLeast over,
// or the run's lease over) still finds the tick taken. These tests run the
// scenarios against a real redis-server (two Clients are two instances;
// one test kills a process in its run) and, for the timing, over the
// memory backend under synctest.

// openTick returns a scheduled time whose tick (truncated to period) has
// at least 5 minutes of its period left, so that a test on the real clock
// never meets the end of the period.
func openTick(period time.Duration) time.Time {
	now := time.Now()
	if time.Until(now.Truncate(period).Add(period)) < 5*time.Minute {
		now = now.Add(5 * time.Minute)
	}
	return now
}

// waitJobFree waits until the job's lock is free, polling Inspect.
func waitJobFree(t *testing.T, ctx context.Context, c *fencelock.Client, name string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		info, err := c.Inspect(ctx, fencelock.JobLockPrefix+name)
		if err != nil {
			t.Fatalf("Inspect of job %s: %v", name, err)
		}
		if !info.Held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still held after %v: %+v", name, limit, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A late instance against real Redis: instance a runs the tick (a
// fast run, LockAtLeast 200ms); instance b fires for the same tick after
// the job is free again. b must not run it.
func TestJobLateInstanceSkipsRanTickRedis(t *testing.T) {
	_, rdb := startRedis(t)
	a, b := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	job := fencelock.Job{Name: "report", Period: time.Hour, LockAtLeast: 200 * time.Millisecond, LockAtMost: 10 * time.Second}
	scheduled := openTick(job.Period)
	ran, err := a.RunJob(ctx, job, scheduled, func(context.Context, *fencelock.Lock) error { return nil })
	if !ran || err != nil {
		t.Fatalf("the first instance: ran %v, %v; want ran", ran, err)
	}
	waitJobFree(t, ctx, b, job.Name, 20*time.Second)
	ran, err = b.RunJob(ctx, job, scheduled, func(context.Context, *fencelock.Lock) error { return nil })
	if ran || err != nil {
		t.Errorf("the late instance, after LockAtLeast: ran %v, %v; want skipped with no error (the tick ran)", ran, err)
	}
	// The next tick is another: it runs.
	ran, err = b.RunJob(ctx, job, scheduled.Add(job.Period), func(context.Context, *fencelock.Lock) error { return nil })
	if !ran || err != nil {
		t.Errorf("the next tick: ran %v, %v; want ran", ran, err)
	}
}

// A run that fails counts as the tick's run: it started. The job is free
// at once after it (LockAtLeast 0), and another instance skips the tick.
func TestJobFailedRunCountsRedis(t *testing.T) {
	_, rdb := startRedis(t)
	a, b := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	job := fencelock.Job{Name: "export", Period: time.Hour, LockAtMost: 10 * time.Second}
	scheduled := openTick(job.Period)
	boom := errors.New("export failed")
	ran, err := a.RunJob(ctx, job, scheduled, func(context.Context, *fencelock.Lock) error { return boom })
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("the failing run: ran %v, %v; want ran, with its error", ran, err)
	}
	waitJobFree(t, ctx, b, job.Name, 20*time.Second)
	ran, err = b.RunJob(ctx, job, scheduled, func(context.Context, *fencelock.Lock) error { return nil })
	if ran || err != nil {
		t.Errorf("another instance after the failed run: ran %v, %v; want skipped (the tick started)", ran, err)
	}
}

// A run whose process is killed -9 counts as the tick's run: once its hold
// has lapsed (LockAtMost 3s), another instance skips that tick, and runs
// the next one.
func TestJobKilledRunCountsForItsTick(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	cmd, out := startJobChild(t, srv.Addr(), jobChildConfig{Mode: "hang"})
	for out.Scan() && out.Text() != "RUNNING" {
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitJobFree(t, ctx, c, "nightly", 20*time.Second)

	job := fencelock.Job{Name: "nightly", LockAtMost: 3 * time.Second} // as the child's
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ran, err := c.RunJob(ctx, job, tick, func(context.Context, *fencelock.Lock) error { return nil })
	if ran || err != nil {
		t.Errorf("the killed run's tick, after its hold lapsed: ran %v, %v; want skipped (the tick started)", ran, err)
	}
	ran, err = c.RunJob(ctx, job, tick.AddDate(0, 0, 1), func(context.Context, *fencelock.Lock) error { return nil })
	if !ran || err != nil {
		t.Errorf("the next tick: ran %v, %v; want ran", ran, err)
	}
}

// The timing, deterministically: tick T runs at T+0 on instance a; other
// instances that fire for T at T+3s (after LockAtLeast, 2s) and at T+9s
// (after the run's lease, LockAtMost 5s, would have ended) skip it,
// whether the run went well, failed, or hung until its lease ended.
func TestJobTickRunsOnceWhateverTheDelay(t *testing.T) {
	for _, outcome := range []string{"ok", "failed", "hung"} {
		t.Run(outcome, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				a := e.client("a")
				job := fencelock.Job{Name: "tick-" + outcome, Period: 10 * time.Second, LockAtLeast: 2 * time.Second, LockAtMost: 5 * time.Second}
				base := time.Now().Truncate(job.Period).Add(job.Period)
				time.Sleep(time.Until(base))
				release := make(chan struct{})
				defer close(release)
				done := make(chan struct{})
				go func() {
					defer close(done)
					ran, err := a.RunJob(context.Background(), job, base, func(ctx context.Context, _ *fencelock.Lock) error {
						time.Sleep(10 * time.Millisecond)
						switch outcome {
						case "failed":
							return errors.New("failed")
						case "hung":
							<-ctx.Done() // the lease ends; the hold is left to lapse
							<-release
						}
						return nil
					})
					if !ran {
						t.Errorf("instance a: ran %v, %v; want ran", ran, err)
					}
				}()
				for i, late := range []time.Duration{3 * time.Second, 9 * time.Second} {
					time.Sleep(time.Until(base.Add(late)))
					c := e.client(string(rune('b' + i)))
					ran, err := c.RunJob(context.Background(), job, base, func(context.Context, *fencelock.Lock) error { return nil })
					if ran || err != nil {
						t.Errorf("an instance %v late: ran %v, %v; want skipped with no error", late, ran, err)
					}
				}
				if outcome != "hung" {
					<-done
				}
			})
		})
	}
}

// An instance whose clock is ahead claims the next tick early; an
// instance that then asks for the tick before it (older than the last one
// claimed) skips it with ErrNotAcquired, since runs follow the order of
// their ticks: it cannot tell whether that tick ran.
func TestJobOlderTickSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		ahead, behind := e.client("ahead"), e.client("behind")
		job := fencelock.Job{Name: "older", Period: 10 * time.Second, LockAtMost: 5 * time.Second}
		base := time.Now().Truncate(job.Period).Add(job.Period)
		time.Sleep(time.Until(base.Add(time.Second)))
		ran, err := ahead.RunJob(context.Background(), job, base.Add(job.Period), func(context.Context, *fencelock.Lock) error { return nil })
		if !ran || err != nil {
			t.Fatalf("the next tick, claimed early: ran %v, %v", ran, err)
		}
		ran, err = behind.RunJob(context.Background(), job, base, func(context.Context, *fencelock.Lock) error { return nil })
		if ran || !errors.Is(err, fencelock.ErrNotAcquired) || !strings.Contains(err.Error(), "later tick") {
			t.Errorf("a tick older than the last claimed: ran %v, %v; want skipped with ErrNotAcquired naming the later tick", ran, err)
		}
	})
}

// RunJob on a backend without the job-tick record refuses with
// ErrUnsupported naming the capability: the lock alone cannot keep the
// promise of one run per tick.
func TestJobNeedsTickRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		defer b.Close()
		c := fencelock.New(struct{ driver.Store }{b})
		defer c.Close()
		job := fencelock.Job{Name: "j", LockAtMost: time.Minute}
		ran, err := c.RunJob(context.Background(), job, time.Now(), func(context.Context, *fencelock.Lock) error { return nil })
		if ran || !errors.Is(err, fencelock.ErrUnsupported) || !strings.Contains(err.Error(), "driver.Ticker") {
			t.Errorf("RunJob without the capability: ran %v, %v; want ErrUnsupported naming driver.Ticker", ran, err)
		}
	})
}

// The record of a run's claim names the tick (its UTC time, fixed width)
// and the run's token, and lives Period + LockAtMost; with no Period,
// JobRecordLifeWithoutPeriod + LockAtMost; never more than MaxTTL.
func TestJobRecordLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		for _, tc := range []struct {
			job  fencelock.Job
			life time.Duration
		}{
			{fencelock.Job{Name: "periodic", Period: 10 * time.Second, LockAtMost: 5 * time.Second}, 15 * time.Second},
			{fencelock.Job{Name: "irregular", LockAtMost: 5 * time.Second}, fencelock.JobRecordLifeWithoutPeriod + 5*time.Second},
			{fencelock.Job{Name: "yearly", Period: fencelock.MaxTTL, LockAtMost: time.Hour}, fencelock.MaxTTL},
		} {
			scheduled := time.Now().Add(1500 * time.Microsecond)
			ran, err := c.RunJob(context.Background(), tc.job, scheduled, func(context.Context, *fencelock.Lock) error { return nil })
			if !ran || err != nil {
				t.Fatalf("%s: ran %v, %v", tc.job.Name, ran, err)
			}
			want := scheduled
			if tc.job.Period > 0 {
				want = scheduled.Truncate(tc.job.Period)
			}
			tick, token, ttl := e.b.TickRecord(tmNS, fencelock.JobLockPrefix+tc.job.Name)
			if tick != want.UTC().Format("2006-01-02T15:04:05.000000000Z") || !strings.HasPrefix(token, "a") || ttl != tc.life {
				t.Errorf("%s: record %q by %q for %v, want the tick %v by the run's token, for %v", tc.job.Name, tick, token, ttl, want.UTC(), tc.life)
			}
		}
	})
}

// A run's claim whose reply is lost is completed by the Client's next
// attempt, with the same token (a retry, not a claimed tick): the tick runs
// once, here.
func TestJobClaimReplyLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		a, b := e.client("a"), e.client("b")
		job := fencelock.Job{Name: "lost-reply", Period: 10 * time.Second, LockAtMost: 5 * time.Second}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, LoseReply: true})
		runs := 0
		ran, err := a.RunJob(context.Background(), job, time.Now(), func(context.Context, *fencelock.Lock) error { runs++; return nil })
		if !ran || err != nil || runs != 1 {
			t.Fatalf("a claim whose reply was lost: ran %v (%d runs), %v; want one run", ran, runs, err)
		}
		ran, err = b.RunJob(context.Background(), job, time.Now(), func(context.Context, *fencelock.Lock) error { runs++; return nil })
		if ran || err != nil {
			t.Errorf("another instance after it: ran %v, %v; want skipped", ran, err)
		}
	})
}

// A scheduled time whose year is outside 1 to 9999 (its tick could not be
// ordered by its name) is refused, naming it.
func TestJobScheduledYearRange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		job := fencelock.Job{Name: "j", LockAtMost: time.Minute}
		for _, at := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC)} {
			ran, err := c.RunJob(context.Background(), job, at, func(context.Context, *fencelock.Lock) error { return nil })
			if ran || !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "scheduled time") {
				t.Errorf("scheduled %v: ran %v, %v; want ErrInvalidArgument naming the scheduled time", at, ran, err)
			}
		}
	})
}
