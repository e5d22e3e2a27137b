package main

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock"
)

// purgeJob is the job that deletes old idempotency records: one run per
// period across all instances (fencelock's RunJob), every instance asking.
var purgeJob = fencelock.Job{
	Name:        "orderservice-purge-records",
	Period:      time.Hour,
	LockAtLeast: 5 * time.Minute,  // instances' clocks and timers differ by far less
	LockAtMost:  10 * time.Minute, // a DELETE of an hour's records takes far less
}

// startPurge runs the purge job at every full purgeJob.Period (on the
// hour) until Close, when cfg.KeepRecords is set: the idempotency records
// of orders older than that are deleted (a request number then counts as
// new again). Every instance asks at the same wall-clock times, so
// restarts do not skip a tick and RunJob lets one of them run it. The
// goroutine belongs to the App: Close stops it and waits for it.
func (a *App) startPurge() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a.stopPurge = func() { cancel(); <-done }
	if a.cfg.KeepRecords <= 0 || a.cfg.NoLock {
		close(done)
		return
	}
	go func() {
		defer close(done)
		for {
			next := time.Now().Truncate(purgeJob.Period).Add(purgeJob.Period)
			t := time.NewTimer(time.Until(next))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			a.purgeOnce(ctx, next)
		}
	}()
}

// purgeOnce runs the purge job's tick of scheduled, unless another
// instance has; it logs what it did.
func (a *App) purgeOnce(ctx context.Context, scheduled time.Time) (ran bool, deleted int64, err error) {
	ran, err = a.locks.RunJob(ctx, purgeJob, scheduled, func(ctx context.Context, _ *fencelock.Lock) error {
		deleted, err = a.store.Idempotency().Purge(ctx, a.cfg.KeepRecords)
		return err
	})
	switch {
	case err != nil && ctx.Err() == nil && !errors.Is(err, fencelock.ErrNotAcquired):
		a.log.Warn("purge of idempotency records failed", "keep_records", a.cfg.KeepRecords.String(), "error", a.cfg.Redactor()(err.Error()))
	case ran:
		a.log.Info("purged idempotency records", "deleted", deleted, "keep_records", a.cfg.KeepRecords.String())
	}
	return ran, deleted, err
}
