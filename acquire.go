package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// minRetryDelay is the shortest fallback timer between attempts.
const minRetryDelay = time.Millisecond

// errWaitElapsed is the cancel cause of a wait that WithWait ended.
var errWaitElapsed = errors.New("fencelock: wait elapsed")

// TryAcquire makes one attempt to take the lock named key, with a lease of
// ttl (counted by the server). It returns an error matching ErrNotAcquired
// when someone else holds the lock, and an error matching ErrInvalidArgument
// for an empty key, a ttl under 1ms or an invalid option.
//
// If the reply is lost (timeout, connection error), TryAcquire returns the
// error and removes, in the background, the hold its request may have made.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	defer c.ops.begin()()
	cfg, err := resolveAcquire(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, lockError("acquire", key, err) // nothing sent, nothing to clean up
	}
	lk, res, err := c.attempt(ctx, req, cfg)
	if err != nil {
		if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrInvalidArgument) {
			c.releaseOrphan(req.LockRef)
		}
		return nil, lockError("acquire", key, err)
	}
	if lk == nil {
		return nil, &NotAcquiredError{Key: key, Attempts: 1, HolderTTL: res.HolderTTL}
	}
	return lk, nil
}

// Acquire takes the lock named key, waiting while someone else holds it,
// until ctx ends, the WithWait bound passes, or the Client is closed. A
// release wakes the waiter at once (with a backend that notifies releases,
// like Redis); otherwise it retries on a jittered timer that never sleeps
// past the holder's remaining lease. Each wake-up makes one attempt.
//
// When it gives up, the error matches ErrNotAcquired and also the reason:
// ctx.Err() when ctx ended it, ErrClosed when Close did. Invalid arguments
// give an error matching ErrInvalidArgument.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	defer c.ops.begin()()
	cfg, err := resolveAcquire(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return c.acquireWaiting(ctx, req, cfg)
}

// newRequest checks that the Client is open and makes the acquire request,
// with a new token and the owner from ctx.
func (c *Client) newRequest(ctx context.Context, key string, ttl time.Duration) (AcquireRequest, error) {
	if c.closed() {
		return AcquireRequest{}, lockError("acquire", key, ErrClosed)
	}
	token, err := c.nextToken()
	if err != nil {
		return AcquireRequest{}, lockError("acquire", key, err)
	}
	owner := token
	if o, ok := OwnerFromContext(ctx); ok {
		if o == "" {
			return AcquireRequest{}, invalid("owner", o, "WithOwner needs a non-empty owner")
		}
		owner = o
	}
	return AcquireRequest{LockRef: c.ref(key, token), Owner: owner, TTL: ttl}, nil
}

// attempt makes one acquire attempt. It returns a held Lock, or nil and the
// result (not acquired), or the backend's error.
func (c *Client) attempt(ctx context.Context, req AcquireRequest, cfg acquireConfig) (*Lock, AcquireResult, error) {
	sent := now()
	res, err := c.backend.Acquire(ctx, req)
	if err != nil {
		return nil, res, err
	}
	if !res.Acquired {
		return nil, res, nil
	}
	if res.Fence <= 0 {
		c.releaseOrphan(req.LockRef)
		return nil, res, fmt.Errorf("backend returned fence %d, not positive", res.Fence)
	}
	lk := newLock(c, req.LockRef, res, req.TTL, cfg.autoRenew, sent)
	if err := c.leases.add(lk); err != nil {
		// Close began while the request was in flight: hand the lock back.
		c.releaseOrphan(req.LockRef)
		lk.end(fmt.Errorf("%w: %w", ErrReleased, ErrClosed))
		return nil, res, err
	}
	c.log.Debug("fencelock: acquired", "key", req.Key, "fence", res.Fence,
		"token", shortToken(req.Token), "holds", res.Holds, "ttl", req.TTL)
	return lk, res, nil
}

// acquireWaiting attempts until the lock is held or waiting ends. All
// attempts use the same token, so an attempt whose reply was lost is
// completed by the next one instead of leaving an orphan hold.
func (c *Client) acquireWaiting(parent context.Context, req AcquireRequest, cfg acquireConfig) (*Lock, error) {
	start := time.Now()
	// first is the context of the first attempt: the caller's, ended by
	// Close too. ctx adds the WithWait bound, for the waiting and the later
	// attempts; a wait of 0 (or shorter than a round trip) still makes one
	// whole attempt.
	first, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	stopOnClose := context.AfterFunc(c.closeCtx, func() { cancel(ErrClosed) })
	defer stopOnClose()
	ctx := first
	if cfg.waitSet {
		var cancelWait context.CancelFunc
		ctx, cancelWait = context.WithTimeoutCause(first, cfg.wait, errWaitElapsed)
		defer cancelWait()
	}

	var (
		watch       *Watch
		wake        <-chan struct{} // release notifications; nil (never ready) without a watch
		watchFailed bool
		timer       *time.Timer
		place       *waiter // our place in this Client's line for the key
		turnSeen    bool    // we are at the head of the line
		skip        bool    // the next wake-up needs no attempt first
		acquired    *Lock
		attempts    int
		failures    int
		holderTTL   time.Duration
		lastErr     error
		ambiguous   bool // an attempt's reply was lost: it may have made a hold
	)
	defer func() {
		if watch != nil {
			watch.Stop()
		}
		if timer != nil {
			timer.Stop()
		}
		if place != nil {
			c.queues.leave(req.Key, place, acquired != nil)
		}
	}()

	// Goroutines of this Client already waiting for the key go first; a
	// re-entrant owner never waits behind them (it may hold the lock).
	// WithWait(0) asks for one attempt: it does not line up either.
	noWait := cfg.waitSet && cfg.wait == 0
	if _, reentrant := OwnerFromContext(parent); !reentrant && !noWait && c.queues.waiting(req.Key) {
		place = c.queues.join(req.Key)
	}

	for {
		if place != nil && !turnSeen {
			select {
			case <-place.turn:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			turnSeen = true
			// The goroutine before us took the lock: nothing to try until it
			// releases (which wakes us through place.wake) or its lease ends.
			skip = place.afterAcquire
		}

		if !skip {
			// This attempt covers every release notified so far.
			drain(wake)
			if place != nil {
				drain(place.wake)
			}
			attemptCtx := ctx
			if attempts == 0 {
				attemptCtx = first
			}
			if attemptCtx.Err() != nil {
				break // ended before this attempt was sent: nothing to clean up
			}
			attempts++
			lk, res, err := c.attempt(attemptCtx, req, cfg)
			if lk != nil {
				acquired = lk
				return lk, nil
			}
			if err != nil {
				if errors.Is(err, ErrInvalidArgument) {
					return nil, lockError("acquire", req.Key, err) // the backend refused the names
				}
				if errors.Is(err, ErrClosed) {
					break
				}
				ambiguous = true
				if ctx.Err() == nil {
					lastErr = err
				}
			} else {
				holderTTL = res.HolderTTL
			}
			if ctx.Err() != nil || noWait {
				break
			}
			if place == nil {
				place = c.queues.join(req.Key)
				if turnSeen = place.isHead(); !turnSeen {
					continue // wait for our turn, then attempt
				}
			}
			if err != nil {
				holderTTL = 0
			}
		}

		// Contended: from now on, wake on releases. The watch is ready before
		// the next attempt, so no release between the two goes unnoticed.
		if watch == nil && c.notifier != nil && !watchFailed {
			w, werr := c.notifier.WatchReleases(ctx, req.Namespace, req.Key)
			if werr == nil {
				watch, wake = w, w.C
				if !skip {
					continue
				}
			} else {
				watchFailed = true
				c.log.Debug("fencelock: release notifications unavailable; polling", "key", req.Key, "error", werr)
			}
		}
		if skip {
			drain(wake) // notifications of releases before our predecessor's hold
			skip = false
		}

		failures++
		// At least a millisecond: a strategy returning zero or less must not
		// turn waiting into a busy loop.
		delay := max(cfg.retry.Backoff(failures), minRetryDelay)
		if holderTTL > 0 && holderTTL < delay {
			delay = holderTTL
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-wake:
		case <-place.wake:
		}
		if ctx.Err() != nil {
			break
		}
	}

	if ambiguous {
		c.releaseOrphan(req.LockRef)
	}
	e := &NotAcquiredError{
		Key:       req.Key,
		Attempts:  attempts,
		Waited:    time.Since(start),
		HolderTTL: holderTTL,
		LastErr:   lastErr,
	}
	switch {
	case parent.Err() != nil:
		e.Cause = parent.Err()
	case c.closed():
		e.Cause, e.LastErr = ErrClosed, nil
	}
	return nil, e
}

// drain empties a wake-up channel without blocking.
func drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}
