package fencelock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Option configures a Client.
type Option func(*clientConfig)

type clientConfig struct {
	namespace      string
	logger         *slog.Logger
	newToken       func() (string, error)
	releaseTimeout time.Duration
	safetyMargin   float64 // fraction of a lease the local deadline ends early
	marginErr      error   // an invalid WithSafetyMargin, reported by every call
	hooks          []Hooks // WithHooks (observer.go), merged by New
	identity       string  // WithIdentity (identity.go); "" stores none
	identityErr    error   // an invalid WithIdentity, reported by every call
}

// DefaultNamespace prefixes the keys of a Client made without WithNamespace.
const DefaultNamespace = "lock"

// MaxTTL is the longest lease a lock may have (a year). Longer ttls are
// refused with an error matching ErrInvalidArgument: a lease is meant to end
// when its holder is gone, and larger values would overflow the millisecond
// arithmetic of stores such as Redis.
const MaxTTL = driver.MaxTTL

// MinTTL is the shortest lease a lock may have, and the shortest bound
// WithMaxHold and Job.LockAtMost take. Shorter ones are refused with an
// error matching ErrInvalidArgument that names the value and this floor.
//
// An acquire counts only if its reply comes within the local lease (the
// ttl less the safety margin): a later reply may come after the lease has
// ended on the server. At 10 ms that leaves 9 ms for a round trip that takes
// a fraction of a millisecond on a healthy network, and a few milliseconds
// on a loaded machine whose scheduler stalls a goroutine now and then. A
// shorter lease would fail such acquires as ErrUnavailable (a 1 ms lease
// leaves 900 µs), reporting an outage where there is none.
const MinTTL = driver.MinTTL

// DefaultSafetyMargin is the fraction of each lease by which the local lease
// deadline ends before the earliest moment the server's lease can end, unless
// WithSafetyMargin says otherwise.
const DefaultSafetyMargin = 0.1

// defaultReleaseTimeout bounds a release made on a detached context (the
// caller's was already done) and the releases made by Close.
const defaultReleaseTimeout = 5 * time.Second

func defaultClientConfig() clientConfig {
	return clientConfig{
		namespace:      DefaultNamespace,
		logger:         slog.New(slog.DiscardHandler),
		newToken:       randomToken,
		releaseTimeout: defaultReleaseTimeout,
		safetyMargin:   DefaultSafetyMargin,
	}
}

// WithNamespace sets the prefix of every key the Client uses (default
// "lock"), so that lock keys are apart from cache keys and one Redis can
// serve several applications. An empty namespace means no prefix.
func WithNamespace(namespace string) Option {
	return func(c *clientConfig) { c.namespace = namespace }
}

// WithLogger makes the Client log acquisitions and releases (debug), and
// renewal failures, releases skipped because the lock was no longer ours and
// losses (warn). A nil logger, like the default, logs nothing.
func WithLogger(logger *slog.Logger) Option {
	return func(c *clientConfig) {
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		c.logger = logger
	}
}

// WithTokenGenerator replaces the generator of owner tokens (default: 128
// random bits from crypto/rand, base64url). Each call must return a value no
// other acquisition of the same key will ever use; an empty token or an error
// fails the acquisition. A nil generator keeps the default.
func WithTokenGenerator(generate func() (string, error)) Option {
	return func(c *clientConfig) {
		if generate == nil {
			generate = randomToken
		}
		c.newToken = generate
	}
}

// WithSafetyMargin sets how early, as a fraction of the ttl, a lock's local
// lease deadline ends before the server's lease can end (default 0.1: a 10s
// lease is held locally for at most 9s after the request that acquired or
// last renewed it was sent). At the local deadline the lock counts as lost
// (Held is false, Err matches ErrLost, Done is closed), unless a renewal
// has succeeded.
//
// The margin absorbs what can delay the loss signal: the goroutine that
// closes Done and cancels Do's context must be scheduled, which takes longer
// in a busy process, and clocks run at slightly different rates. A process
// starved of CPU for longer than the margin can still learn of a loss after
// another holder has the lock; Held and Err, which read the clock, are never
// late, and the fencing token keeps the data safe in every case. The
// fraction must be between 0.001 and 0.5; an invalid value makes every call
// of the Client fail with an error matching ErrInvalidArgument.
func WithSafetyMargin(fraction float64) Option {
	return func(c *clientConfig) {
		c.safetyMargin, c.marginErr = fraction, nil
		if !(fraction >= 0.001 && fraction <= 0.5) { // also refuses NaN
			c.marginErr = invalid("WithSafetyMargin fraction", fraction, "must be between 0.001 and 0.5")
		}
	}
}

// AcquireOption configures one TryAcquire, Acquire or Do.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	autoRenew      time.Duration // 0: no automatic renewal
	autoRenewSet   bool
	wait           time.Duration
	waitSet        bool
	retry          RetryStrategy
	maxFailures    int // consecutive failed attempts before giving up; 0: no limit
	maxFailuresSet bool
	maxHold        time.Duration // WithMaxHold (maxhold.go); 0: no bound
	maxHoldSet     bool
	fair           bool // WithFairness: wait in the server's line (fair.go)
	// kind is the kind of hold the call takes: the plain lock, a semaphore
	// permit, a read or write hold (semaphore.go, rwlock.go).
	kind Kind
	// keepAlive, when positive, is how often a waiter must attempt at the
	// least, because each attempt renews something on the store that
	// lapses otherwise (a writer's intent, a reader's place). Such a waiter
	// also releases its token when it gives up, to withdraw what it
	// registered.
	keepAlive time.Duration
	// notify makes the acquisition and every release of the hold wake the
	// backend's watchers (driver.Request.Notify, driver.ReleaseRequest.Notify):
	// Campaign's, for Observe.
	notify bool
	// tick is the tick a RunJob acquisition claims (driver.Ticker); nil
	// for every other acquisition.
	tick *tickClaim
}

// notifyWatchers makes the hold's acquisition wake change watchers, and its
// releases wake release watchers even when no acquire was refused
// (driver.Request.Notify, driver.ReleaseRequest.Notify).
func notifyWatchers() AcquireOption {
	return func(c *acquireConfig) { c.notify = true }
}

// DefaultMaxFailures is how many consecutive failed attempts (the backend
// could not be reached) an Acquire or Do with no deadline makes before it
// gives up with ErrUnavailable: about 3 seconds of outage with the default
// retry strategy.
const DefaultMaxFailures = 10

// WithAutoRenew renews the lock every interval until it is released, keeping
// its lease at the full ttl. The interval must be positive and shorter than
// the ttl; ttl/3 leaves two attempts before the lease runs out. Do renews
// every ttl/3 unless this option says otherwise. A renewal may go out up to
// a fifth of the interval early, to share a round trip with the renewals of
// the Client's other locks.
//
// When renewal finds the lock gone, or the lease deadline passes without a
// successful renewal (the server is unreachable or paused), the lock is lost:
// Done is closed and Err returns ErrLost.
func WithAutoRenew(interval time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.autoRenew, c.autoRenewSet = interval, true }
}

// WithWait bounds the whole of Acquire or Do's wait for the lock, whatever
// the context allows, including a request in flight when the bound passes.
// Zero means a single attempt, like TryAcquire. Without it, the context and
// Close end the wait (and, when neither sets a deadline, DefaultMaxFailures
// consecutive failures). The bound is independent of the lease ttl.
func WithWait(maxWait time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.wait, c.waitSet = maxWait, true }
}

// WithMaxFailures makes Acquire and Do give up, with an error matching
// ErrUnavailable, after n consecutive attempts that failed because the
// backend could not be reached or did not answer in time. An attempt that
// finds the lock held starts the count again. Zero means no limit: only the
// context, WithWait and Close end the wait.
//
// Without this option, a call that has a deadline (from its context or
// WithWait) tries until the deadline, so that it rides out a failover; a
// call without any deadline gives up after DefaultMaxFailures failures, so
// that an outage never makes it wait forever.
func WithMaxFailures(n int) AcquireOption {
	return func(c *acquireConfig) { c.maxFailures, c.maxFailuresSet = n, true }
}

// WithRetry sets the fallback timer between attempts while waiting. Release
// notifications wake a waiter at once; the timer only covers notifications
// that never arrive and leases that expire without a release, and is always
// cut short at the holder's remaining lease. The default is
// ExponentialBackoff{Min: 10ms, Max: 1s}. A fair waiter (WithFairness) that
// receives notifications has no use for it: the store tells it alone when
// its turn comes, so it attempts only to renew its place in line (every
// third of driver.PlaceLease) or when the holder's lease ends; the timer is
// its fallback without notifications and after failures.
func WithRetry(strategy RetryStrategy) AcquireOption {
	return func(c *acquireConfig) { c.retry = strategy }
}

// resolveAcquire applies opts and validates them against key and ttl.
func (c *Client) resolveAcquire(key string, ttl time.Duration, opts []AcquireOption) (acquireConfig, error) {
	cfg := acquireConfig{retry: defaultRetry}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
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

// checkTTL refuses a lease shorter than MinTTL or longer than MaxTTL.
func checkTTL(ttl time.Duration) error {
	return checkLease("ttl", ttl)
}

// checkLease refuses a lease, named name, shorter than MinTTL or longer
// than MaxTTL.
func checkLease(name string, d time.Duration) error {
	if d < MinTTL || d > MaxTTL {
		return invalid(name, d, "must be between MinTTL ("+MinTTL.String()+") and MaxTTL ("+MaxTTL.String()+")")
	}
	return nil
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
