package fencelock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/lease"
	"github.com/fencelock/fencelock/internal/waitq"
)

// Client acquires locks in a store (a driver.Store: redisbackend.New(rdb),
// an etcd or Redlock backend). It is safe for concurrent use; make one per
// process (or per store) and share it. Close it when done: it
// ends waits, releases the locks it still holds and stops its goroutines.
type Client struct {
	store   driver.Store     // every request goes to it; closed by Close, named in errors
	notify  driver.Notifier  // nil when the store has no notifications
	lines   driver.Lines     // nil when it keeps no line of waiters and hands nothing over
	holdsOf driver.Inspector // nil when it cannot report a name's holds
	ticker  driver.Ticker    // nil when it keeps no record of job ticks (RunJob then refuses)
	cfg     clientConfig
	log     *slog.Logger
	hooks   Hooks // WithHooks, merged (observer.go); nil fields are skipped

	// closeCtx is cancelled, with cause ErrClosed, by Close, which then
	// ends the contexts of the waits, acquire attempts and Do and RunJob
	// functions in progress (onClose) the same way, at once. Renewals go
	// on until Close has released the locks.
	closeCtx context.Context
	closeFn  context.CancelCauseFunc
	onClose  closeSet

	leases   *lease.Keeper // every held lock: renewal and local lease deadlines
	releaser *releaser     // releases to retry in the background
	queues   waitq.Queues  // goroutines waiting for the same key, in order

	// maxFence is the largest fence any acquisition of this Client got; it
	// is the FenceFloor of every acquire request (see driver.Request).
	maxFence atomic.Int64

	ops       opCounter // calls in progress that use the backend; Close waits for them
	closeOnce sync.Once
	closeErr  error
}

// New returns a Client that keeps its locks in s. The Client takes ownership
// of s: Close closes it if it implements io.Closer. (The Redis connection s
// uses stays the caller's.) The capabilities s has beside driver.Store
// (Notifier, Lines, Inspector, Ticker) are found here, once.
func New(s driver.Store, opts ...Option) *Client {
	cfg := defaultClientConfig()
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	c := &Client{store: s, cfg: cfg, log: cfg.logger, hooks: mergeHooks(cfg.hooks)}
	c.notify, _ = s.(driver.Notifier)
	c.lines, _ = s.(driver.Lines)
	c.holdsOf, _ = s.(driver.Inspector)
	c.ticker, _ = s.(driver.Ticker)
	c.closeCtx, c.closeFn = context.WithCancelCause(context.Background())
	c.ops.init()
	c.leases = lease.New(c.store.Renew, c.noteRenewals)
	c.releaser = newReleaser(c)
	return c
}

// Close ends every wait and acquire attempt in progress (their errors match
// ErrClosed), waits for the other calls in progress, releases the locks the
// Client still holds (their Err then matches ErrReleased and ErrClosed),
// finishes the releases still pending in the background, stops the
// renewal goroutine and waits for it, and closes the backend. Locks are
// renewed until they are released, so none lapses because of Close. The
// releases together get 5 seconds; those not confirmed by then lapse on the
// server, and Close reports them, as it reports releases the backend
// refused (ErrMisconfigured). Later calls return ErrClosed errors.
// Close is idempotent.
func (c *Client) Close() error {
	if c == nil {
		return errNilClient
	}
	c.closeOnce.Do(func() {
		// End the waits and refuse new calls, then let the calls in flight
		// finish: a lock they acquire is then among those released below.
		c.closeFn(ErrClosed)
		c.onClose.close()
		c.ops.wait()
		held := c.leases.StopAccepting()

		// The releases, here and in the background, share one deadline.
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.releaseTimeout)
		defer cancel()
		var mu sync.Mutex
		var errs []error
		var refused int // releases the backend refused (ErrMisconfigured)
		var refusal error
		var wg sync.WaitGroup
		for _, h := range held {
			wg.Go(func() {
				err := (*Lock)(h.(*keptLock)).release(ctx, ErrClosed)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, ErrNotHeld):
					// Ended meanwhile (its error may say how: a lock lost
					// to a refused renewal matches ErrMisconfigured too).
				case errors.Is(err, ErrMisconfigured):
					refused++
					refusal = err
				case err != nil && !errors.Is(err, ErrUnavailable):
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		if refused > 0 {
			errs = append(errs, fmt.Errorf("fencelock: %d releases refused, their leases will lapse on the server: %w", refused, refusal))
		}
		deadline, _ := ctx.Deadline()
		if err := c.releaser.close(time.Until(deadline)); err != nil {
			errs = append(errs, err)
		}
		c.leases.Stop()
		if closer, ok := c.store.(io.Closer); ok {
			if err := closer.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		c.closeErr = joinErrors(errs...)
	})
	return c.closeErr
}

// opCounter counts calls in progress. Unlike a WaitGroup, it may count up
// while someone waits for it to reach zero. Counting is atomic, and end is
// made once (init), so that the acquire and release paths neither allocate
// nor take a lock shared by every goroutine of the Client for it; the mutex
// is taken only when the count reaches zero, to wake wait.
type opCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	idle  sync.Cond
	endFn func()
}

// init prepares o for use.
func (o *opCounter) init() {
	o.idle.L = &o.mu
	o.endFn = o.end
}

// begin counts a call in; it returns end, which counts it out.
func (o *opCounter) begin() (end func()) {
	o.n.Add(1)
	return o.endFn
}

// end counts a call out.
func (o *opCounter) end() {
	if o.n.Add(-1) == 0 {
		// wait checks the count and sleeps under mu: broadcasting under
		// it too, a wake-up cannot fall between the two.
		o.mu.Lock()
		o.idle.Broadcast()
		o.mu.Unlock()
	}
}

// wait returns when no call is in progress.
func (o *opCounter) wait() {
	o.mu.Lock()
	for o.n.Load() > 0 {
		o.idle.Wait()
	}
	o.mu.Unlock()
}

// closed reports whether Close has been called.
func (c *Client) closed() bool { return c.closeCtx.Err() != nil }

// ref names the hold of key by token in the Client's namespace.
func (c *Client) ref(key, token string) driver.Ref {
	return driver.Ref{Namespace: c.cfg.namespace, Key: key, Token: token}
}

// detached returns a context for cleanup work that must happen even though
// ctx is done (a release after the caller gave up), bounded in time.
func (c *Client) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), c.cfg.releaseTimeout)
}

// boundBy returns ctx bounded by deadline, with cause as the cause of its
// end then (nil: context.DeadlineExceeded). When ctx already ends by then,
// it returns ctx itself: no context, no timer, on the path every
// acquisition and release takes with a request context.
func boundBy(ctx context.Context, deadline time.Time, cause error) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && !d.After(deadline) {
		return ctx, func() {}
	}
	if cause == nil {
		return context.WithDeadline(ctx, deadline)
	}
	return context.WithDeadlineCause(ctx, deadline, cause)
}

// debugEnabled reports whether the Client's logger records debug messages:
// the acquire and release paths build their debug attributes only then,
// since boxing them costs allocations on every call even when discarded.
func (c *Client) debugEnabled() bool {
	return c.log.Enabled(context.Background(), slog.LevelDebug)
}

// unavailable is the error of a call that got no answer from the backend:
// err is the last backend error, and the call's context (or Close) the
// reason it stopped trying, if it did. When the backend refused the client
// instead (err matches ErrMisconfigured), which is no outage, it is err
// with the operation and key.
func (c *Client) unavailable(ctx context.Context, op, key string, attempts int, start time.Time, err error) error {
	if errors.Is(err, ErrMisconfigured) {
		if key == "" {
			return fmt.Errorf("fencelock: %s: %w", op, err)
		}
		return lockError(op, key, err)
	}
	e := &UnavailableError{Op: op, Key: key, Attempts: attempts, Waited: time.Since(start), Err: err}
	switch {
	case ctx.Err() != nil:
		e.Cause = ctxErr(ctx)
	case c.closed():
		e.Cause = ErrClosed
	}
	return e
}

// ctxErr is the error of a context that has ended: ctx.Err(), and its
// cause (context.Cause) when that is another error, so that the error
// matches both.
func ctxErr(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}

// nextToken returns a new owner token from the configured generator.
func (c *Client) nextToken() (string, error) {
	token, err := c.cfg.newToken()
	if err != nil {
		return "", fmt.Errorf("fencelock: token generator failed: %w", err)
	}
	if token == "" {
		return "", invalid("token", token, "the token generator returned an empty token")
	}
	return token, nil
}

// now is time.Now, read before a request is sent: leases are measured from
// there on the monotonic clock.
func now() time.Time { return time.Now() }

// Check reports, at start-up rather than at the first lock, a Client that
// cannot work: an invalid option (WithSafetyMargin, WithIdentity), a namespace the
// backend cannot use (the Redis backend refuses braces, which would break
// Cluster hash tags), or a backend that cannot be reached or cannot run
// what it needs (driver.Store.Check). Invalid options give an error matching
// ErrInvalidArgument, a store that cannot be reached one matching
// ErrUnavailable, and a store that refuses the client's credentials or
// its user's permissions (a wrong password, an ACL without the commands,
// keys or channels fencelock uses) one matching ErrMisconfigured. Call it
// once after New:
//
//	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace(ns))
//	if err := locks.Check(ctx); err != nil {
//		log.Fatal(err)
//	}
func (c *Client) Check(ctx context.Context) error {
	if c == nil {
		return errNilClient
	}
	if ctx == nil {
		return errNilContext
	}
	if c.cfg.marginErr != nil {
		return c.cfg.marginErr
	}
	if c.cfg.identityErr != nil {
		return c.cfg.identityErr
	}
	if c.closed() {
		return fmt.Errorf("fencelock: check: %w", ErrClosed)
	}
	if err := c.store.Check(ctx, c.cfg.namespace); err != nil {
		if errors.Is(err, ErrInvalidArgument) {
			return err
		}
		return c.unavailable(ctx, "check", "", 1, time.Now(), err)
	}
	return nil
}

// acquireStart calls Hooks.AcquireStart, and returns the context of the
// call's other hooks.
func (c *Client) acquireStart(ctx context.Context, key string, kind Kind) context.Context {
	if h := c.hooks.AcquireStart; h != nil {
		if hctx := h(ctx, AcquireEvent{Key: key, Kind: kind}); hctx != nil {
			return hctx
		}
	}
	return ctx
}

// refused reports an acquire call refused before it made an attempt, and
// returns its error.
func (c *Client) refused(ctx context.Context, key string, kind Kind, err error) error {
	if h := c.hooks.AcquireDone; h != nil {
		h(ctx, AcquireEvent{Key: key, Kind: kind, Outcome: outcomeOf(err), Err: err})
	}
	return err
}

// noteRenewals reports a renewal batch sent at sent, with its results.
func (c *Client) noteRenewals(sent time.Time, results []driver.RenewResult, err error, n int) {
	h := c.hooks.RenewalDone
	if h == nil {
		return
	}
	ev := RenewalEvent{Locks: n, Duration: time.Since(sent)}
	// Close cancels the renewals still in flight once it has released
	// their locks (Stop): those did not fail.
	closing := c.leases.Stopped()
	for i := range n {
		switch {
		case err != nil || results[i].Err != nil:
			if !closing {
				ev.Failed++
			}
		case !results[i].Held:
			ev.Gone++
		}
	}
	h(ev)
}
