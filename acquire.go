package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// TryAcquire makes one attempt to take the lock named key, with a lease of
// ttl (counted by the server). It returns an error matching ErrNotAcquired
// when someone else holds the lock, one matching ErrUnavailable when the
// backend could not be reached or did not answer before the lease it asked
// for could have ended, and one matching ErrInvalidArgument for an empty
// key, a ttl outside [MinTTL, MaxTTL] or an invalid option. When ctx has
// already ended, it makes no attempt and returns ctx's error alone (see
// Acquire).
//
// If the reply is lost (timeout, connection error), TryAcquire returns the
// error and removes, in the background, the hold its request may have made;
// the backend refuses the request if it arrives later.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if c == nil {
		return nil, errNilClient
	}
	if ctx == nil {
		return nil, errNilContext
	}
	defer c.ops.begin()()
	hctx := c.acquireStart(ctx, key, KindLock)
	cfg, err := c.resolveAcquire(key, ttl, opts)
	if err != nil {
		return nil, c.refused(hctx, key, KindLock, err)
	}
	cfg.wait, cfg.waitSet = 0, true // one attempt
	req, err := c.newRequest(ctx, key, ttl)
	if err != nil {
		return nil, c.refused(hctx, key, KindLock, err)
	}
	return c.acquireWaiting(ctx, hctx, req, cfg)
}

// Acquire takes the lock named key, waiting while someone else holds it,
// until ctx ends, the WithWait bound passes, or the Client is closed. A
// release wakes the waiter at once (with a backend that notifies releases,
// like Redis); otherwise it retries on a jittered timer that never sleeps
// past the holder's remaining lease. Each wake-up makes one attempt.
//
// When it gives up while the lock is held by someone else, the error matches
// ErrNotAcquired and also the reason: ctx.Err() when ctx ended it, ErrClosed
// when Close did. When the backend could not be reached (the last attempts
// failed or went unanswered), the error matches ErrUnavailable instead; see
// WithMaxFailures for when Acquire stops trying during an outage. Invalid
// arguments give an error matching ErrInvalidArgument.
//
// A caller's context that ends the call is the caller's, not contention:
// the error matches ctx.Err() (and context.Cause(ctx)), and ErrNotAcquired
// only if the last attempt found the lock held by someone else (or another
// call of this Client holds it), ErrUnavailable only if the attempts
// failed. A ctx that has already ended makes no attempt: the error matches
// ctx's error alone. The same holds for every acquire: Do, AcquireAll,
// DoAll, the acquires of Semaphore and RWLock, Campaign and RunJob.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if c == nil {
		return nil, errNilClient
	}
	if ctx == nil {
		return nil, errNilContext
	}
	defer c.ops.begin()()
	hctx := c.acquireStart(ctx, key, KindLock)
	cfg, err := c.resolveAcquire(key, ttl, opts)
	if err != nil {
		return nil, c.refused(hctx, key, KindLock, err)
	}
	req, err := c.newRequest(ctx, key, ttl)
	if err != nil {
		return nil, c.refused(hctx, key, KindLock, err)
	}
	return c.acquireWaiting(ctx, hctx, req, cfg)
}

// newRequest checks that the Client is open and makes the acquire request,
// with a new token and the owner from ctx.
func (c *Client) newRequest(ctx context.Context, key string, ttl time.Duration) (driver.Request, error) {
	if c.closed() {
		return driver.Request{}, lockError("acquire", key, ErrClosed)
	}
	token, err := c.nextToken()
	if err != nil {
		return driver.Request{}, lockError("acquire", key, err)
	}
	owner := token
	if o, ok := ownerFromContext(ctx); ok {
		if o == "" {
			return driver.Request{}, invalid("owner", o, "WithOwner needs a non-empty owner")
		}
		owner = o
	}
	return driver.Request{Ref: c.ref(key, token), Owner: owner, TTL: ttl, Identity: c.cfg.identity}, nil
}

// noteFence raises the Client's fence floor to fence.
func (c *Client) noteFence(fence int64) {
	for {
		seen := c.maxFence.Load()
		if fence <= seen || c.maxFence.CompareAndSwap(seen, fence) {
			return
		}
	}
}

// attempt makes one acquire attempt, bounded by ctx and by the local
// deadline of the lease it asks for: a reply after that is of no use, since
// the lease may already have ended on the server. It returns a held Lock, or
// nil and the result (not acquired), or an error: the backend's, or
// errReplyTooLate. tombstone marks a Lock whose acquisition may have a late
// copy on the way (an earlier attempt's reply was lost).
//
// seq numbers the attempts of one waiter (for grants: driver.Turn).
func (c *Client) attempt(ctx context.Context, req driver.Request, cfg acquireConfig, tombstone bool, seq int64) (*Lock, driver.Result, error) {
	req.FenceFloor = c.maxFence.Load()
	sent := now()
	deadline := c.leaseEnd(sent, req.TTL)
	actx, cancel := boundBy(ctx, deadline, errReplyTooLate)
	var res driver.Result
	var err error
	switch {
	case cfg.fair:
		res, err = c.fairAttempt(actx, req, cfg.waitSet && cfg.wait == 0, seq)
	case cfg.tick != nil:
		res, err = c.acquireTick(actx, req, cfg.tick)
	default:
		if cfg.keepAlive > 0 && !(cfg.waitSet && cfg.wait == 0) {
			req.Place = driver.PlaceLease // a waiter's intent or place lives while it attempts
		}
		res, err = c.store.Acquire(actx, req)
	}
	cancel()
	tooLate := func() error {
		within := fmt.Sprintf("within %v (the ttl %v less the safety margin)", c.localLease(req.TTL), req.TTL)
		if errors.Is(err, ErrNotSent) { // cut before it left: nothing to clean up
			return fmt.Errorf("%w %s", ErrNotSent, within)
		}
		return fmt.Errorf("%w %s", errReplyTooLate, within)
	}
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errReplyTooLate):
		return nil, driver.Result{}, tooLate()
	case err != nil:
		return nil, res, err
	case !res.Acquired:
		return nil, res, nil
	case !time.Now().Before(c.grantedEnd(sent, req.TTL, res.Validity)):
		// Granted, but the reply came too late to use the lease.
		return nil, driver.Result{}, tooLate()
	}
	lk, err := c.hold(req, cfg, res, sent, tombstone)
	return lk, res, err
}

// hold makes the Lock for an acquisition with result res, whose lease the
// store counts from no earlier than sent, and hands it to the lease keeper.
func (c *Client) hold(req driver.Request, cfg acquireConfig, res driver.Result, sent time.Time, tombstone bool) (*Lock, error) {
	if res.Fence <= 0 {
		return nil, fmt.Errorf("backend returned fence %d, not positive", res.Fence)
	}
	c.noteFence(res.Fence)
	lk := newLock(c, req, res, cfg.autoRenew, sent, tombstone)
	lk.kind = req.Kind
	lk.notify = cfg.notify
	lk.limitHold(cfg.maxHold)
	if lk.kind == KindLock {
		lk.counted = true
		c.queues.Took(req.Key)
	}
	if err := c.leases.Add(&lk.kept, (*keptLock)(lk)); err != nil {
		// Close began releasing while the request was in flight.
		lk.end(fmt.Errorf("%w: %w", ErrReleased, ErrClosed))
		return nil, ErrClosed
	}
	if c.debugEnabled() {
		c.log.Debug("fencelock: acquired", "key", req.Key, "fence", res.Fence,
			"token", shortToken(req.Token), "holds", res.Holds, "ttl", req.TTL)
	}
	return lk, nil
}

// WithFairness makes the call wait in one line with every other fair waiter
// for the key, in every process: the lock goes to waiters in the order in
// which they first found it held (first come, first served), and each
// release wakes only the waiter whose turn it is. Without it, waiters of
// one Client take turns in order and, with the Redis backend, the processes
// that wait take turns (each release wakes the next one, which may hand
// the lock on to its own waiters a few times), but a caller that is not
// waiting yet may take a free lock first: no order across processes is
// promised.
//
// The line is kept on the server, each place with a lease of 2 seconds
// (driver.PlaceLease) that the waiter renews while it waits: a waiter that crashes or is paused
// for longer loses its place, and holds the others up for that long at
// most. A waiter that gives up leaves the line at once.
//
// Use it for every acquire of a key: a plain acquire ignores the line, so
// it may take the lock while fair waiters wait for it. With TryAcquire (or
// WithWait(0)) the call does not join the line, and takes the lock only
// when no one is waiting in it. The store must keep lines of waiters
// (driver.Lines); otherwise the call fails with ErrUnsupported.
func WithFairness() AcquireOption {
	return func(c *acquireConfig) { c.fair = true }
}

// fairRenewPlace is how often a fair waiter renews its place in line.
const fairRenewPlace = driver.PlaceLease / 3

// fairAttempt makes one attempt for a fair waiter: it joins the line or
// renews its place, unless the call makes a single attempt. seq numbers
// the waiter's attempts; a waiter in line accepts grants (fairGrantLease),
// which a store without them ignores.
func (c *Client) fairAttempt(ctx context.Context, req driver.Request, single bool, seq int64) (driver.Result, error) {
	if single {
		return c.lines.AcquireInLine(ctx, req, driver.Turn{})
	}
	return c.lines.AcquireInLine(ctx, req, driver.Turn{Place: driver.PlaceLease, Grant: fairGrantLease(req.TTL), Seq: seq})
}

// fairGrantLease is the lease a release grants a fair waiter with ttl: no
// longer than a place in line lasts (see driver.Lines).
func fairGrantLease(ttl time.Duration) time.Duration {
	return min(ttl, driver.PlaceLease)
}

// checkFair refuses WithFairness on a backend without a line of waiters.
func (c *Client) checkFair(cfg acquireConfig) error {
	if cfg.fair && c.lines == nil {
		return fmt.Errorf("%w: WithFairness needs a store that keeps a line of waiters (driver.Lines); %T does not", ErrUnsupported, c.store)
	}
	return nil
}

// completeGrant extends, in the background, the lease of a lock granted to
// a fair waiter for less than its ttl (fairGrantLease) to the full ttl, as
// Refresh does; the caller has the lock meanwhile. It waits first for a
// third of what is left of the granted lease: in a busy line most locks
// are released before that, and then need no second round trip (the
// extension would otherwise be a second script in every fair hand-off). It
// retries while the store cannot be reached, until the lock ends (its local
// deadline, a release, Close). Close waits for it.
func (c *Client) completeGrant(lk *Lock, ttl time.Duration) {
	end := c.ops.begin()
	go func() {
		defer end()
		first := time.NewTimer(time.Until(lk.Deadline()) / 3)
		select {
		case <-lk.Done():
			first.Stop()
			return
		case <-c.closeCtx.Done():
			first.Stop()
			return
		case <-first.C:
		}
		pause := min(fairGrantLease(ttl)/8, 100*time.Millisecond)
		for {
			lk.mu.Lock()
			ttl := lk.ttl // a Refresh by the caller may have changed it
			lk.mu.Unlock()
			err := lk.Refresh(c.closeCtx, ttl)
			if err == nil || !errors.Is(err, ErrUnavailable) || c.closed() {
				return // extended, or the lock ended (lost, released), or Close
			}
			t := time.NewTimer(pause)
			select {
			case <-lk.Done():
				t.Stop()
				return
			case <-c.closeCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}

// resolveAcquire applies opts and validates them against key and ttl.
func (c *Client) resolveAcquire(key string, ttl time.Duration, opts []AcquireOption) (acquireConfig, error) {
	cfg := acquireConfig{retry: defaultRetry}
	if len(opts) > 0 {
		cfg = applyAcquireOptions(cfg, opts)
	}
	if c.cfg.marginErr != nil {
		return cfg, c.cfg.marginErr
	}
	if c.cfg.identityErr != nil {
		return cfg, c.cfg.identityErr
	}
	if key == "" {
		return cfg, invalid("key", key, "must not be empty")
	}
	if err := checkTTL(ttl); err != nil {
		return cfg, err
	}
	if cfg.autoRenewSet {
		if err := c.checkRenewInterval(cfg.autoRenew, ttl); err != nil {
			return cfg, err
		}
	}
	if cfg.waitSet && cfg.wait < 0 {
		return cfg, invalid("WithWait duration", cfg.wait, "must not be negative")
	}
	if cfg.maxFailuresSet && cfg.maxFailures < 0 {
		return cfg, invalid("WithMaxFailures count", cfg.maxFailures, "must not be negative")
	}
	if cfg.maxHoldSet && cfg.maxHold < MinTTL {
		return cfg, invalid("WithMaxHold duration", cfg.maxHold, "must be at least MinTTL ("+MinTTL.String()+")")
	}
	if cfg.retry == nil {
		return cfg, invalid("WithRetry strategy", nil, "must not be nil")
	}
	if err := c.checkFair(cfg); err != nil {
		return cfg, err
	}
	if v, ok := cfg.retry.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// checkRenewInterval refuses a renewal interval that would not renew the
// lock before its local lease deadline (the ttl less the safety margin).
func (c *Client) checkRenewInterval(interval, ttl time.Duration) error {
	if local := c.localLease(ttl); interval <= 0 || interval >= local {
		return invalid("WithAutoRenew interval", interval, fmt.Sprintf(
			"must be positive and shorter than the local lease %v (the ttl %v less the safety margin)", local, ttl))
	}
	return nil
}
