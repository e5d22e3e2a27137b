package fencelock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy chooses the fallback timer of a waiting Acquire: how long to
// wait after a failed attempt when no release notification comes. The Client
// always cuts the delay short at the holder's remaining lease and at the end
// of the wait.
type RetryStrategy interface {
	// Backoff returns the delay after the given number of failed attempts
	// (1 after the first).
	Backoff(failures int) time.Duration
}

// ExponentialBackoff doubles the delay from Min up to Max, and spreads each
// delay uniformly over its upper half so that waiters do not retry in step.
type ExponentialBackoff struct {
	Min time.Duration // first delay, > 0
	Max time.Duration // largest delay, >= Min
}

var defaultRetry RetryStrategy = ExponentialBackoff{Min: 10 * time.Millisecond, Max: time.Second}

// Backoff implements RetryStrategy.
func (b ExponentialBackoff) Backoff(failures int) time.Duration {
	d := b.Min
	for i := 1; i < failures && d < b.Max; i++ {
		if d > b.Max/2 {
			d = b.Max // doubling would pass Max (or overflow)
			break
		}
		d *= 2
	}
	return jitter(min(d, b.Max))
}

func (b ExponentialBackoff) validate() error {
	if b.Min <= 0 {
		return invalid("ExponentialBackoff.Min", b.Min, "must be positive")
	}
	if b.Max < b.Min {
		return invalid("ExponentialBackoff.Max", b.Max, "must not be less than Min "+b.Min.String())
	}
	return nil
}

// ConstantBackoff retries after about the same delay each time, spread
// uniformly over [Delay/2, Delay].
type ConstantBackoff struct {
	Delay time.Duration // > 0
}

// Backoff implements RetryStrategy.
func (b ConstantBackoff) Backoff(int) time.Duration { return jitter(b.Delay) }

func (b ConstantBackoff) validate() error {
	if b.Delay <= 0 {
		return invalid("ConstantBackoff.Delay", b.Delay, "must be positive")
	}
	return nil
}

// jitter returns a duration drawn uniformly from [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
