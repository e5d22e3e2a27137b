package fencelock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Client acquires locks through a Backend. It is safe for concurrent use;
// make one per process (or per backend) and share it. Close it when done: it
// ends waits, releases the locks it still holds and stops its goroutine.
type Client struct {
	backend  Backend
	notifier ReleaseNotifier // nil when the backend has no release notifications
	cfg      clientConfig
	log      *slog.Logger

	// closeCtx is cancelled, with cause ErrClosed, by Close. Waits and
	// attempts in progress watch it so that Close ends them at once.
	closeCtx context.Context
	closeFn  context.CancelCauseFunc

	leases *leaseKeeper // every held lock: renewal and local lease deadlines
	queues waitQueues   // goroutines waiting for the same key, in order

	ops       opCounter      // calls in progress that use the backend; Close waits for them
	cleanup   sync.WaitGroup // best-effort releases after ambiguous acquire errors
	closeOnce sync.Once
	closeErr  error
}

// New returns a Client that keeps its locks in b. The Client takes ownership
// of b: Close closes it if it implements io.Closer. (The Redis connection b
// uses stays the caller's.)
func New(b Backend, opts ...Option) *Client {
	cfg := defaultClientConfig()
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	c := &Client{backend: b, cfg: cfg, log: cfg.logger}
	c.notifier, _ = b.(ReleaseNotifier)
	c.closeCtx, c.closeFn = context.WithCancelCause(context.Background())
	c.ops.idle = sync.NewCond(&c.ops.mu)
	c.leases = newLeaseKeeper(c)
	return c
}

// Close ends every wait in progress (their errors match ErrClosed and
// ErrNotAcquired), releases the locks the Client still holds (each within 5
// seconds; their Err then matches ErrReleased and ErrClosed), stops the
// renewal goroutine and waits for it, and closes the backend. Later calls
// return ErrClosed errors. Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		// End the waits and refuse new calls, then let the calls in flight
		// finish: a lock they acquire is then among those released below,
		// and no clean-up starts after Close has waited for clean-ups.
		c.closeFn(ErrClosed)
		c.ops.wait()
		held := c.leases.stopAccepting()

		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for _, lk := range held {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), c.cfg.releaseTimeout)
				defer cancel()
				if err := lk.release(ctx, ErrClosed); err != nil && !errors.Is(err, ErrNotHeld) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		c.leases.stop()
		c.cleanup.Wait()
		if closer, ok := c.backend.(io.Closer); ok {
			if err := closer.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// opCounter counts calls in progress. Unlike a WaitGroup, it may count up
// while someone waits for it to reach zero.
type opCounter struct {
	mu   sync.Mutex
	n    int
	idle *sync.Cond
}

// begin counts a call in; it returns end, which counts it out.
func (o *opCounter) begin() (end func()) {
	o.mu.Lock()
	o.n++
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		if o.n--; o.n == 0 {
			o.idle.Broadcast()
		}
		o.mu.Unlock()
	}
}

// wait returns when no call is in progress.
func (o *opCounter) wait() {
	o.mu.Lock()
	for o.n > 0 {
		o.idle.Wait()
	}
	o.mu.Unlock()
}

// closed reports whether Close has been called.
func (c *Client) closed() bool { return c.closeCtx.Err() != nil }

// ref names the hold of key by token in the Client's namespace.
func (c *Client) ref(key, token string) LockRef {
	return LockRef{Namespace: c.cfg.namespace, Key: key, Token: token}
}

// detached returns a context for cleanup work that must happen even though
// ctx is done (a release after the caller gave up), bounded in time.
func (c *Client) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), c.cfg.releaseTimeout)
}

// orphanRecheck is how long after a first clean-up release that found
// nothing releaseOrphan tries once more: the acquire it cleans up after may
// still be on its way to the server (on another connection) and land after
// the first release.
const orphanRecheck = time.Second

// releaseOrphan removes a hold that an acquire may have created even though
// its reply was lost (a timeout is ambiguous). It runs in the background,
// bounded in time, and Close waits for it (cutting the second try short).
func (c *Client) releaseOrphan(ref LockRef) {
	c.cleanup.Go(func() {
		for try := 1; ; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.releaseTimeout)
			res, err := c.backend.Release(ctx, ReleaseRequest{LockRef: ref})
			cancel()
			switch {
			case err != nil:
				c.log.Debug("fencelock: orphan cleanup failed; the lease will lapse on the server",
					"key", ref.Key, "token", shortToken(ref.Token), "error", err)
				return
			case res.Held:
				c.log.Info("fencelock: released a hold whose acquire reply was lost",
					"key", ref.Key, "token", shortToken(ref.Token))
				return
			case try == 2:
				return
			}
			select {
			case <-time.After(orphanRecheck):
			case <-c.closeCtx.Done():
				return
			}
		}
	})
}

// nextToken returns a new owner token from the configured generator.
func (c *Client) nextToken() (string, error) {
	token, err := c.cfg.newToken()
	if err != nil {
		return "", errors.Join(errors.New("fencelock: token generator failed"), err)
	}
	if token == "" {
		return "", invalid("token", token, "the token generator returned an empty token")
	}
	return token, nil
}

// now is time.Now, read before a request is sent: leases are measured from
// there on the monotonic clock.
func now() time.Time { return time.Now() }
