package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Job is a scheduled task that must run at most once per tick across every
// instance of a service, such as a report every night or a sweep every
// minute. Every instance's scheduler calls Client.RunJob for each tick; one
// of them runs it.
type Job struct {
	// Name names the job. Its runs hold the lock named "job:" + Name, so
	// they are fenced like any lock and show in Inspect under that key.
	Name string

	// Period is the length of the job's ticks. RunJob names a tick by its
	// scheduled time truncated to Period (since the zero time, as
	// time.Time.Truncate does), so instances whose schedulers fire a little
	// apart, or pass time.Now() at the moment they fire, agree on the tick.
	// An attempt waits while an earlier tick's run holds the job, until the
	// tick's period is over. Zero: the scheduled time itself names the tick
	// (irregular schedules, such as cron's "9:00 on weekdays"), and an
	// attempt that finds an earlier run holding the job does not wait.
	Period time.Duration

	// LockAtLeast is how long the job stays taken after a run starts, even
	// when the run is over sooner: an instance whose clock or scheduler is
	// late by less than this finds the tick taken and skips it. Set it above
	// the largest difference between your instances' clocks plus their
	// scheduling delays, and below Period. Zero: the job is free again as
	// soon as the run ends.
	LockAtLeast time.Duration

	// LockAtMost is the lease of a run: a run that crashes (or a process
	// that is killed) holds the job for at most this long. The run is not
	// renewed: its context is cancelled, with cause ErrLost, when its lease
	// is about to end (LockAtMost less the safety margin). It must be at
	// least LockAtLeast and MinTTL, and should be above the longest run.
	LockAtMost time.Duration
}

// JobLockPrefix is prefixed to a Job's Name to make the key its runs lock.
const JobLockPrefix = "job:"

// RunJob runs fn for the tick of job scheduled at scheduled, unless another
// instance is running or has run that tick; it reports whether fn ran here.
// Call it from every instance's scheduler, with the time the tick was
// scheduled for (or time.Now() when it fires, if the job has a Period).
//
// Why one run per tick: every instance names the tick alike, and that name
// is the owner (WithOwner) of the hold a run takes on the job's lock. The
// first attempt for a tick takes the lock. A later attempt for the same
// tick re-enters that hold instead of waiting, sees from the second hold
// that the tick is taken, gives its hold back and returns false. The hold
// lasts until the run is over and LockAtLeast has passed since it began
// (LockAtMost when the process dies), so every attempt made within
// LockAtLeast of the first is turned away, however fast the run was. An
// attempt for another tick finds a hold of another owner and waits for it
// to end (within the tick's Period), so runs never overlap: a run longer
// than a Period delays the next tick's run, or makes it skip if it is still
// running when that tick's period ends.
//
// fn gets the run's Lock (its Fence orders the runs: pass it to what the
// job writes) and a context cancelled when the lease is about to end. When
// fn returns before LockAtLeast is over, the run's hold is shortened to end
// then, and left to lapse on the server; otherwise it is released.
//
// RunJob returns fn's error, joined with an error matching ErrLost when the
// lease ended while fn ran. When fn did not run, err is nil if another
// instance has the tick, matches ErrNotAcquired when an earlier tick's run
// held the job until this tick's period was over, ErrUnavailable when the
// backend could not be reached, and ctx's error when ctx ended the attempt
// (as for Acquire: with ErrNotAcquired only if an earlier run was seen
// holding the job). Invalid fields of job give an error matching
// ErrInvalidArgument.
func (c *Client) RunJob(ctx context.Context, job Job, scheduled time.Time, fn func(ctx context.Context, run *Lock) error) (ran bool, err error) {
	if c == nil {
		return false, errNilClient
	}
	if ctx == nil {
		return false, errNilContext
	}
	if err := job.validate(scheduled, fn); err != nil {
		return false, err
	}
	defer c.ops.begin()() // Close waits for fn, as for Do
	tick := scheduled
	if job.Period > 0 {
		tick = scheduled.Truncate(job.Period)
	}
	owner := fmt.Sprintf("%s%s@%s", JobLockPrefix, job.Name, tick.UTC().Format(time.RFC3339Nano))
	wait := WithWait(0)
	if job.Period > 0 {
		// Bounded by the local clock: the tick's period as this instance
		// sees it.
		left := time.Until(tick.Add(job.Period))
		if left <= 0 {
			return false, lockError("run job", job.Name, fmt.Errorf("%w: the period of the tick at %v is over", ErrNotAcquired, tick))
		}
		wait = WithWait(left)
	}
	lk, err := c.Acquire(WithOwner(ctx, owner), JobLockPrefix+job.Name, job.LockAtMost, wait)
	if err != nil {
		return false, err
	}
	if lk.Holds() > 1 {
		// Re-entered the hold of the instance that has this tick.
		if err := lk.Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
			c.log.Warn("fencelock: job: could not give back a second hold of a tick; it lapses with its lease",
				"job", job.Name, "tick", tick, "error", err)
		}
		return false, nil
	}
	started := lk.Deadline().Add(-c.localLease(job.LockAtMost)) // when the acquire was sent
	c.log.Info("fencelock: job run", "job", job.Name, "tick", tick, "fence", lk.Fence())

	// fn's context ends when the lease does, or when the Client is closed.
	runCtx, cancel := context.WithCancelCause(ctx)
	stopOnEnd := lk.whenEnded(func(err error) { cancel(err) })
	stopOnClose := context.AfterFunc(c.closeCtx, func() { cancel(ErrClosed) })
	defer func() {
		stopOnClose()
		stopOnEnd()
		cancel(context.Canceled)
		if lost := lk.Err(); lost != nil {
			// The lease ended first; its hold is already being released.
			err = runError(fmt.Sprintf("fencelock: run job %q", job.Name), err, lost)
			return
		}
		c.finishRun(ctx, job, lk, started)
	}()
	return true, fn(runCtx, lk)
}

// finishRun ends a run that went well: the job's lock is kept until
// LockAtLeast after the run started, then lapses on the server; or
// released now if that time is past.
func (c *Client) finishRun(ctx context.Context, job Job, lk *Lock, started time.Time) {
	keep := time.Until(started.Add(job.LockAtLeast))
	if keep < time.Millisecond {
		if err := lk.Release(ctx); err != nil {
			c.log.Warn("fencelock: job: release after the run failed; the run's hold lapses with its lease",
				"job", job.Name, "error", err)
		}
		return
	}
	if err := lk.Refresh(ctx, max(keep, MinTTL)); err != nil { // a lease is MinTTL at least
		// The hold stays until LockAtMost: later ticks wait longer, but
		// nothing runs twice.
		c.log.Warn("fencelock: job: could not shorten the run's hold to LockAtLeast; it lapses with its lease",
			"job", job.Name, "error", err)
	}
	// Forget the hold without releasing it: the server ends it at
	// LockAtLeast, and the lease keeper must not report it lost.
	lk.endReleased(ctx, fmt.Errorf("%w: held on the server until LockAtLeast (%v) after the run started", ErrReleased, job.LockAtLeast))
}

// validate checks a job's fields and RunJob's other arguments.
func (job Job) validate(scheduled time.Time, fn func(context.Context, *Lock) error) error {
	switch {
	case job.Name == "":
		return invalid("Job.Name", job.Name, "must not be empty")
	case job.Period < 0:
		return invalid("Job.Period", job.Period, "must not be negative")
	case job.LockAtMost < MinTTL || job.LockAtMost > MaxTTL:
		return checkLease("Job.LockAtMost", job.LockAtMost)
	case job.LockAtLeast < 0 || job.LockAtLeast > job.LockAtMost:
		return invalid("Job.LockAtLeast", job.LockAtLeast, fmt.Sprintf("must be between 0 and LockAtMost (%v)", job.LockAtMost))
	case scheduled.IsZero():
		return invalid("scheduled time", scheduled, "must not be the zero time")
	case fn == nil:
		return invalid("fn", nil, "must not be nil")
	}
	return nil
}
