package fencelock

import (
	"log/slog"
	"time"
)

// Option configures a Client.
type Option func(*clientConfig)

type clientConfig struct {
	namespace      string
	logger         *slog.Logger
	newToken       func() (string, error)
	releaseTimeout time.Duration
}

// DefaultNamespace prefixes the keys of a Client made without WithNamespace.
const DefaultNamespace = "lock"

// defaultReleaseTimeout bounds a release made on a detached context (the
// caller's was already done) and the releases made by Close.
const defaultReleaseTimeout = 5 * time.Second

func defaultClientConfig() clientConfig {
	return clientConfig{
		namespace:      DefaultNamespace,
		logger:         slog.New(slog.DiscardHandler),
		newToken:       randomToken,
		releaseTimeout: defaultReleaseTimeout,
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

// AcquireOption configures one TryAcquire, Acquire or Do.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	autoRenew    time.Duration // 0: no automatic renewal
	autoRenewSet bool
	wait         time.Duration
	waitSet      bool
	retry        RetryStrategy
}

// WithAutoRenew renews the lock every interval until it is released, keeping
// its lease at the full ttl. The interval must be positive and shorter than
// the ttl; ttl/3 leaves two attempts before the lease runs out. Do renews
// every ttl/3 unless this option says otherwise.
//
// When renewal finds the lock gone, or the lease deadline passes without a
// successful renewal (the server is unreachable or paused), the lock is lost:
// Done is closed and Err returns ErrLost.
func WithAutoRenew(interval time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.autoRenew, c.autoRenewSet = interval, true }
}

// WithWait bounds how long Acquire and Do wait for the lock, whatever the
// context allows. Zero means a single attempt. Without it, only the context
// (and Close) ends the wait. The bound is independent of the lease ttl.
func WithWait(maxWait time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.wait, c.waitSet = maxWait, true }
}

// WithRetry sets the fallback timer between attempts while waiting. Release
// notifications wake a waiter at once; the timer only covers notifications
// that never arrive and leases that expire without a release, and is always
// cut short at the holder's remaining lease. The default is
// ExponentialBackoff{Min: 10ms, Max: 1s}.
func WithRetry(strategy RetryStrategy) AcquireOption {
	return func(c *acquireConfig) { c.retry = strategy }
}

// resolveAcquire applies opts and validates them against key and ttl.
func resolveAcquire(key string, ttl time.Duration, opts []AcquireOption) (acquireConfig, error) {
	cfg := acquireConfig{retry: defaultRetry}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if key == "" {
		return cfg, invalid("key", key, "must not be empty")
	}
	if ttl < time.Millisecond {
		return cfg, invalid("ttl", ttl, "must be at least 1ms")
	}
	if cfg.autoRenewSet && (cfg.autoRenew <= 0 || cfg.autoRenew >= ttl) {
		return cfg, invalid("WithAutoRenew interval", cfg.autoRenew, "must be positive and shorter than the ttl "+ttl.String())
	}
	if cfg.waitSet && cfg.wait < 0 {
		return cfg, invalid("WithWait duration", cfg.wait, "must not be negative")
	}
	if cfg.retry == nil {
		return cfg, invalid("WithRetry strategy", nil, "must not be nil")
	}
	if v, ok := cfg.retry.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
