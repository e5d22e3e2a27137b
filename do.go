package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs fn while holding the lock named key. It waits for the lock like
// Acquire, renews it every ttl/3 (WithAutoRenew changes that), calls fn with
// a context that is cancelled the moment ownership is lost (context.Cause
// then matches ErrLost), waits for fn to return, and releases the lock, also
// when fn panics.
//
// Close does not take the lock away from a running fn: it cancels fn's
// context (cause ErrClosed), keeps renewing the lock, and waits for fn to
// return and Do to release it, so that no other holder can enter while fn
// still runs. (So fn must not call Close itself.)
//
// Do returns fn's error. When the lock was lost while fn ran, the error also
// matches ErrLost, even if fn returned nil: fn's work may have overlapped
// with another holder's, and only fencing tokens (lk.Fence) checked by the
// resource make that harmless. Such an error, or fn's with a release that
// failed, is one error on one line that matches both (errors.Is,
// errors.As) and says the loss once.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, lk *Lock) error, opts ...AcquireOption) (err error) {
	if c == nil {
		return errNilClient
	}
	if ctx == nil {
		return errNilContext
	}
	if fn == nil {
		return invalid("fn", nil, "must not be nil")
	}
	if checkTTL(ttl) == nil {
		// Renew every ttl/3 unless the caller's options say otherwise.
		opts = append([]AcquireOption{WithAutoRenew(ttl / 3)}, opts...)
	}
	// The whole of Do is a call in flight: Close waits for fn.
	defer c.ops.begin()()
	lk, err := c.Acquire(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	return runHolding(c, ctx, lk, fn, fmt.Sprintf("fencelock: do %q", key))
}

// holding is what Do and DoAll run fn under: a Lock or a MultiLock.
type holding interface {
	whenEnded(f func(error)) (stop func())
	lostErr() error
	Release(ctx context.Context) error
}

// runHolding calls fn with a context that ends when h ends (with its error
// as the cause) or when the Client is closed (ErrClosed), waits for fn, and
// releases h, also when fn panics. It returns fn's error joined, on one
// line, with the loss of h when h was lost while fn ran or its release
// found it gone (fn's work may then have overlapped with another holder's),
// or else with the release's error (runError; prefix names the call).
func runHolding[H holding](c *Client, ctx context.Context, h H, fn func(context.Context, H) error, prefix string) (err error) {
	fnCtx, cancel := context.WithCancelCause(ctx)
	stopOnEnd := h.whenEnded(func(err error) { cancel(err) })
	c.onClose.add(fnCtx, cancel)
	defer func() {
		c.onClose.remove(fnCtx)
		stopOnEnd()
		cancel(context.Canceled)
		lost := h.lostErr()
		releaseErr := h.Release(ctx)
		if lost == nil {
			lost = h.lostErr() // the release may have found it gone
		}
		switch {
		case lost != nil:
			err = runError(prefix, err, lost)
		case err == nil:
			err = releaseErr // already names the call and key
		default:
			err = runError(prefix, err, releaseErr)
		}
	}()
	return fn(fnCtx, h)
}

// lostErr returns l's error if l was lost, or nil.
func (l *Lock) lostErr() error {
	if err := l.Err(); errors.Is(err, ErrLost) {
		return err
	}
	return nil
}
