package fencelock

import (
	"context"
	"errors"
	"time"
)

// Do runs fn while holding the lock named key. It waits for the lock like
// Acquire, renews it every ttl/3 (WithAutoRenew changes that), calls fn with
// a context that is cancelled the moment ownership is lost (context.Cause
// then matches ErrLost), waits for fn to return, and releases the lock, also
// when fn panics.
//
// Do returns fn's error. When the lock was lost while fn ran, the error also
// matches ErrLost, even if fn returned nil: fn's work may have overlapped
// with another holder's, and only fencing tokens (lk.Fence) checked by the
// resource make that harmless.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, lk *Lock) error, opts ...AcquireOption) (err error) {
	if c == nil {
		return errNilClient
	}
	if fn == nil {
		return invalid("fn", nil, "must not be nil")
	}
	if checkTTL(ttl) == nil {
		// Renew every ttl/3 unless the caller's options say otherwise.
		opts = append([]AcquireOption{WithAutoRenew(ttl / 3)}, opts...)
	}
	lk, err := c.Acquire(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	fnCtx, stop := lk.Context(ctx)
	defer func() {
		stop()
		lost := lk.Err()
		releaseErr := lk.Release(ctx)
		if lost == nil {
			lost = lk.Err() // the release may have found it gone
		}
		if errors.Is(lost, ErrLost) {
			err = join(err, lockError("do", key, lost))
		} else {
			err = join(err, releaseErr)
		}
	}()
	return fn(fnCtx, lk)
}

// join is errors.Join that leaves a single error as it is.
func join(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	default:
		return errors.Join(a, b)
	}
}
