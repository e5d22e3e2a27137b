package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
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
	// tick's period is over by the local clock; after that RunJob refuses
	// the tick. Zero: the scheduled time itself names the tick (irregular
	// schedules, such as cron's "9:00 on weekdays"), and an attempt that
	// finds an earlier run holding the job does not wait.
	Period time.Duration

	// LockAtLeast is how long the job stays taken after a run starts, even
	// when the run is over sooner. An instance that asks for the same tick
	// later is turned away by the job's record of the tick whatever its
	// delay; LockAtLeast keeps apart the runs of ticks that instances name
	// differently: with no Period, when each passes its own time.Now(), an
	// instance late by less than LockAtLeast finds the job taken. Set it
	// above the largest difference between your instances' clocks plus
	// their scheduling delays, and below Period. Zero: the job is free again
	// as soon as the run ends.
	LockAtLeast time.Duration

	// LockAtMost is the lease of a run: a run that crashes (or a process
	// that is killed) holds the job for at most this long; its tick stays
	// claimed. The run is not renewed: its context is cancelled, with cause
	// ErrLost, when its lease is about to end (LockAtMost less the safety
	// margin). It must be at least LockAtLeast and MinTTL, and should be
	// above the longest run. It is also the allowance for the instances'
	// clocks in the life of the job's record (see RunJob).
	LockAtMost time.Duration
}

// jobLockPrefix is prefixed to a Job's Name to make the key its runs lock.
const jobLockPrefix = "job:"

// RunJob runs fn for the tick of job scheduled at scheduled, unless another
// instance is running or has run that tick; it reports whether fn ran here.
// Call it from every instance's scheduler, with the time the tick was
// scheduled for (or time.Now() when it fires, if the job has a Period).
//
// Why at most one run per tick: the job's lock keeps a record of the last
// tick claimed (driver.Ticker), and a run's acquisition of the lock claims
// its tick in the same atomic step. An attempt for a tick that the record
// names, or for an earlier tick, takes nothing and returns: that tick ran,
// is running, or began and failed, or its process died. A started run
// counts however it ended, and the record outlives its hold, so an
// instance however late skips the tick. An attempt for a later tick finds
// the job held by the earlier run and waits for it (within the tick's
// Period), so runs never overlap: a run longer than a Period delays the
// next tick's run, or makes it skip if it is still running when that
// tick's period ends. The run's hold is on the lock "job:" + Name, with
// the tick as owner (WithOwner), so Inspect shows it.
//
// The record lives Period plus LockAtMost after the run's acquisition
// (jobRecordLifeWithoutPeriod plus LockAtMost for a job with no Period; at
// most MaxTTL), and each run's claim replaces it: one key per job. RunJob
// refuses a tick whose period is over by the local clock, so while the
// record lives, every instance whose clock is within LockAtMost of the
// claiming one's is turned away from the tick. After it lapses, an
// instance could run the tick again only if its clock were behind by more
// than that. A tick older than the one the record names is skipped too
// (err matches ErrNotAcquired): runs follow the order of their ticks, and
// the record cannot tell whether the older tick ran. A claim counts from
// the moment the store records it: if the reply is lost and this instance
// gives up, the tick is skipped rather than risk a second run. The record
// is as durable as the lock itself (see the backend's documentation on
// failover).
//
// fn gets the run's Lock (its Fence orders the runs: pass it to what the
// job writes) and a context cancelled when the lease is about to end. When
// fn returns before LockAtLeast is over, the run's hold is shortened to end
// then, and left to lapse on the server; otherwise it is released.
//
// RunJob returns fn's error, joined with an error matching ErrLost when the
// lease ended while fn ran. When fn did not run, err is nil if the tick was
// claimed by another run; it matches ErrNotAcquired when a later tick was
// claimed, or an earlier tick's run held the job until this tick's period
// was over; ErrUnavailable when the backend could not be reached; and
// ctx's error when ctx ended the attempt (as for Acquire: with
// ErrNotAcquired only if an earlier run was seen holding the job). Invalid
// fields of job give an error matching ErrInvalidArgument, and a store
// without a record of the last tick claimed (driver.Ticker) one matching
// ErrUnsupported: the lock alone cannot keep the promise of one run per
// tick.
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
	if c.ticker == nil {
		return false, lockError("run job", job.Name, fmt.Errorf(
			"%w: jobs need a store that keeps a record of the last tick claimed (driver.Ticker); %T does not", ErrUnsupported, c.store))
	}
	defer c.ops.begin()() // Close waits for fn, as for Do
	tick := scheduled
	if job.Period > 0 {
		tick = scheduled.Truncate(job.Period)
	}
	owner := fmt.Sprintf("%s%s@%s", jobLockPrefix, job.Name, tick.UTC().Format(time.RFC3339Nano))
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
	lk, err := c.Acquire(WithOwner(ctx, owner), jobLockPrefix+job.Name, job.LockAtMost, wait, claimTick(tickName(tick), job.recordLife()))
	if claimed := asTickClaimed(err); claimed != nil {
		if claimed.sameTick() {
			return false, nil // another instance has the tick
		}
		return false, lockError("run job", job.Name, err)
	}
	if err != nil {
		return false, err
	}
	if lk.Holds() > 1 {
		// Re-entered a hold of the same owner that claimed no tick (a
		// plain Acquire with this owner): not a run of its own.
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
	c.onClose.add(runCtx, cancel)
	defer func() {
		c.onClose.remove(runCtx)
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
	case scheduled.UTC().Year() < 1 || scheduled.UTC().Year() > 9999:
		return invalid("scheduled time", scheduled, "must be within the years 1 to 9999")
	case fn == nil:
		return invalid("fn", nil, "must not be nil")
	}
	return nil
}

// jobRecordLifeWithoutPeriod is how long, beyond LockAtMost, the record
// of a Job with no Period keeps its last claimed tick: a week. An instance
// late by less than that for such a tick skips it. The record is one key
// per job, rewritten by each tick's run, so a long life costs nothing more.
const jobRecordLifeWithoutPeriod = 7 * 24 * time.Hour

// recordLife is how long the record of a run of job keeps its tick: its
// Period (or jobRecordLifeWithoutPeriod) plus LockAtMost, at most MaxTTL.
func (job Job) recordLife() time.Duration {
	life := job.Period
	if life == 0 {
		life = jobRecordLifeWithoutPeriod
	}
	if life > MaxTTL-job.LockAtMost {
		return MaxTTL
	}
	return life + job.LockAtMost
}

// tickLayout writes a tick's UTC time with a fixed number of digits, so
// that ticks compare as byte strings in the order of their times (for
// years 1 to 9999, which Job.validate checks).
const tickLayout = "2006-01-02T15:04:05.000000000Z"

// tickName is the name of the tick at t in the job's record.
func tickName(t time.Time) string { return t.UTC().Format(tickLayout) }

// claimTick makes the acquisition claim tick for life (driver.Ticker).
func claimTick(tick string, life time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.tick = &tickClaim{tick: tick, life: life} }
}

// acquireTick makes one attempt of a RunJob acquisition. A claimed tick
// ends the attempts: the error is a *tickClaimedError.
func (c *Client) acquireTick(ctx context.Context, req driver.Request, t *tickClaim) (driver.Result, error) {
	res, err := c.ticker.AcquireTick(ctx, driver.TickRequest{Request: req, Tick: t.tick, RecordLife: t.life})
	if err == nil && res.Claimed && !res.Acquired {
		return driver.Result{}, &tickClaimedError{tick: t.tick, last: res.LastTick}
	}
	return res.Result, err
}

// tickClaimedError ends a RunJob acquisition whose tick, or a later one,
// was claimed already. It matches ErrNotAcquired.
type tickClaimedError struct {
	tick, last string
}

func (e *tickClaimedError) Error() string {
	if e.last == e.tick {
		return fmt.Sprintf("fencelock: lock not acquired: the tick at %s was claimed already", e.tick)
	}
	return fmt.Sprintf("fencelock: lock not acquired: the tick at %s is older than a later tick claimed (%s)", e.tick, e.last)
}

// Is reports whether target is ErrNotAcquired.
func (e *tickClaimedError) Is(target error) bool { return target == ErrNotAcquired }

// sameTick reports whether the record names the tick asked for (rather than
// a later one).
func (e *tickClaimedError) sameTick() bool { return e.last == e.tick }

// asTickClaimed returns err as a *tickClaimedError, or nil.
func asTickClaimed(err error) *tickClaimedError {
	var tc *tickClaimedError
	if errors.As(err, &tc) {
		return tc
	}
	return nil
}
