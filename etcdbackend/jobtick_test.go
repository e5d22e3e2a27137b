package etcdbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// RunJob on etcd: a tick runs once, and an instance that asks for it after
// the run is over (the job free again) skips it; a failed run counts too.
func TestJobTickRunsOnce(t *testing.T) {
	a, b := newLocks(t), newLocks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job := fencelock.Job{Name: "etcd-report", Period: 24 * time.Hour, LockAtMost: 10 * time.Second}
	scheduled := time.Now().Truncate(job.Period).Add(job.Period) // the next day's tick: its period is open
	boom := errors.New("report failed")
	ran, err := a.RunJob(ctx, job, scheduled, func(context.Context, *fencelock.Lock) error { return boom })
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("the first instance: ran %v, %v; want ran, with its error", ran, err)
	}
	if info, err := b.Inspect(ctx, "job:"+job.Name); err != nil || info.Held {
		t.Fatalf("the job after its run: %+v, %v; want free (LockAtLeast 0)", info, err)
	}
	ran, err = b.RunJob(ctx, job, scheduled, func(context.Context, *fencelock.Lock) error { return nil })
	if ran || err != nil {
		t.Errorf("another instance after the (failed) run: ran %v, %v; want skipped", ran, err)
	}
	ran, err = b.RunJob(ctx, job, scheduled.Add(job.Period), func(context.Context, *fencelock.Lock) error { return nil })
	if !ran || err != nil {
		t.Errorf("the next tick: ran %v, %v; want ran", ran, err)
	}
}
