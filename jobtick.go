package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// JobRecordLifeWithoutPeriod is how long, beyond LockAtMost, the record
// of a Job with no Period keeps its last claimed tick: a week. An instance
// late by less than that for such a tick skips it. The record is one key
// per job, rewritten by each tick's run, so a long life costs nothing more.
const JobRecordLifeWithoutPeriod = 7 * 24 * time.Hour

// recordLife is how long the record of a run of job keeps its tick: its
// Period (or JobRecordLifeWithoutPeriod) plus LockAtMost, at most MaxTTL.
func (job Job) recordLife() time.Duration {
	life := job.Period
	if life == 0 {
		life = JobRecordLifeWithoutPeriod
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

// tickClaim is the acquire option of a RunJob attempt: the tick its
// acquisition claims (driver.TickRequest).
type tickClaim struct {
	tick string
	life time.Duration
}

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
