package fencelock

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

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
	identity       string  // WithIdentity; "" stores none
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

// defaultSafetyMargin is the fraction of each lease by which the local lease
// deadline ends before the earliest moment the server's lease can end, unless
// WithSafetyMargin says otherwise.
const defaultSafetyMargin = 0.1

// defaultReleaseTimeout bounds a release made on a detached context (the
// caller's was already done) and the releases made by Close.
const defaultReleaseTimeout = 5 * time.Second

func defaultClientConfig() clientConfig {
	return clientConfig{
		namespace:      DefaultNamespace,
		logger:         slog.New(slog.DiscardHandler),
		newToken:       randomToken,
		releaseTimeout: defaultReleaseTimeout,
		safetyMargin:   defaultSafetyMargin,
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

// WithHooks makes the Client call h's functions as it acquires, waits for,
// releases, renews and loses locks (see Hooks). It may be given more than
// once: the hooks of each are called, in the order given.
func WithHooks(h Hooks) Option {
	return func(c *clientConfig) { c.hooks = append(c.hooks, h) }
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
	maxHold        time.Duration // WithMaxHold (lease.go); 0: no bound
	maxHoldSet     bool
	fair           bool // WithFairness: wait in the server's line (acquire.go)
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

// defaultMaxFailures is how many consecutive failed attempts (the backend
// could not be reached) an Acquire or Do with no deadline makes before it
// gives up with ErrUnavailable: about 3 seconds of outage with the default
// retry strategy.
const defaultMaxFailures = 10

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
// Close end the wait (and, when neither sets a deadline, defaultMaxFailures
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
// call without any deadline gives up after defaultMaxFailures failures, so
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

// applyAcquireOptions returns cfg with opts applied. It is a function of
// its own because the options take cfg's address, which moves cfg to the
// heap: a call without options then costs no allocation.
func applyAcquireOptions(cfg acquireConfig, opts []AcquireOption) acquireConfig {
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	return cfg
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

type ownerKey struct{}

// WithOwner returns a context that makes acquisitions re-entrant for owner:
// acquiring a key that owner already holds (through any Client on the same
// backend) succeeds at once with the same fencing token and one more hold;
// the lock is freed when every hold has been released. The context carries
// the owner along the call chain, as a thread identity does elsewhere.
//
// owner must identify one logical holder across all processes (for example a
// process id plus a job id): two processes that use the same owner share the
// lock. Without WithOwner nothing re-enters: a second acquisition of a held
// key waits like any other.
//
// It panics when ctx is nil, as context.WithValue does.
func WithOwner(ctx context.Context, owner string) context.Context {
	mustContext("WithOwner", ctx)
	return context.WithValue(ctx, ownerKey{}, owner)
}

// ownerFromContext returns the owner set by WithOwner, if any. It panics
// when ctx is nil.
func ownerFromContext(ctx context.Context) (owner string, ok bool) {
	mustContext("ownerFromContext", ctx)
	owner, ok = ctx.Value(ownerKey{}).(string)
	return owner, ok
}

// maxIdentityLen is the longest identity WithIdentity accepts, in bytes.
const maxIdentityLen = 256

// WithIdentity makes the Client store identity with every lock it takes,
// for operators: "fencelock ls" and "fencelock inspect", the dashboard and
// Client.Inspect (LockInfo.Identity) show who holds a lock, where the owner
// token says nothing. defaultIdentity gives host:pid; any short text works
// ("billing-7 pid 4242", a pod name). It is informational only: it plays no
// part in ownership (that is WithOwner's) or fencing.
//
// The identity is recorded by the acquisition that takes a free lock; a
// re-entry keeps the first one. The Redis backend stores it in the lock's
// hash (field id) within the acquire script, and only when it is set, so a
// Client without it sends and stores nothing more. Backends that do not
// record it ignore it; acquisitions made through the line of fair waiters
// (WithFairness), semaphore permits and read/write holds do not record it.
//
// identity must be valid UTF-8 of at most maxIdentityLen bytes without
// control characters (it is printed in tables and log lines); otherwise
// Check and every acquire fail with an error matching ErrInvalidArgument.
// An empty identity stores nothing.
func WithIdentity(identity string) Option {
	return func(c *clientConfig) {
		c.identity, c.identityErr = identity, checkIdentity(identity)
	}
}

// defaultIdentity returns "host:pid", this process's host name and process
// id, for WithIdentity: enough for an operator to find the holder of a
// stuck lock. The host is "unknown-host" when the system does not say.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// checkIdentity refuses an identity that cannot be shown on one line.
func checkIdentity(identity string) error {
	switch {
	case len(identity) > maxIdentityLen:
		return invalid("WithIdentity identity", identity, fmt.Sprintf("must be at most %d bytes, is %d", maxIdentityLen, len(identity)))
	case !utf8.ValidString(identity):
		return invalid("WithIdentity identity", identity, "must be valid UTF-8")
	}
	for _, r := range identity {
		if unicode.IsControl(r) {
			return invalid("WithIdentity identity", identity, fmt.Sprintf("must not contain control characters (%U)", r))
		}
	}
	return nil
}

// randomToken returns 128 random bits, base64url without padding (22 bytes).
func randomToken() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// shortToken shortens a token for logs: enough to tell holders apart, too
// little to release someone else's lock with.
func shortToken(token string) string {
	if len(token) > 8 {
		return token[:8]
	}
	return token
}

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

// tickClaim is the acquire option of a RunJob attempt: the tick its
// acquisition claims (driver.TickRequest).
type tickClaim struct {
	tick string
	life time.Duration
}
