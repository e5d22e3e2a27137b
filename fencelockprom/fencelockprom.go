// Package fencelockprom exports the events of fencelock Clients as
// Prometheus metrics. It is a module of its own, so that programs that do
// not use Prometheus do not download it.
//
// Make one Metrics, register it, and pass its Hooks to the Clients:
//
//	m := fencelockprom.New()
//	prometheus.MustRegister(m)
//	locks := fencelock.New(backend, fencelock.WithHooks(m.Hooks()))
//
// Several Clients may share one Metrics; their events add up.
//
// # Metrics
//
//	fencelock_acquire_wait_seconds{kind,outcome}  histogram  time an acquire call took, attempts and waiting included, by how it ended
//	fencelock_hold_seconds{kind}                  histogram  time a released lock was held, from the sending of its acquiring request to its release
//	fencelock_held_locks{kind}                    gauge      locks held now
//	fencelock_waiters{kind}                       gauge      acquire calls waiting now for a lock someone else holds (or for the backend)
//	fencelock_locks_lost_total{kind,reason}       counter    locks lost: reason "gone" (a renewal or release found the hold gone), "deadline" (not renewed in time), "max_hold" (WithMaxHold), "refused" (a renewal refused: fencelock.ErrMisconfigured)
//	fencelock_renewals_total                      counter    automatic lease renewals sent
//	fencelock_renewal_failures_total              counter    of those, renewals that failed: no answer (retried until the lock's deadline), or refused (the lock is lost)
//	fencelock_renewal_batch_seconds               histogram  time from sending a batch of renewals (one round trip) to its answer
//
// kind is "lock", "semaphore", "read" or "write" (fencelock.Kind); outcome is
// "acquired", "not_acquired", "unavailable", "invalid", "closed", "canceled"
// or "misconfigured" (fencelock.AcquireEvent).
//
// Lock keys are not a label by default: a label value per key makes a
// series per key, without bound. WithKeyLabel adds a "key" label to the
// metrics about single locks (all but the renewal ones), with a function
// that maps keys to a bounded set of values (such as "order" for
// "order:1234").
package fencelockprom

import (
	"context"
	"sync"

	"github.com/fencelock/fencelock"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are Prometheus metrics fed by the Hooks of fencelock Clients. It
// is a prometheus.Collector: register it once. Its methods are safe for
// concurrent use.
type Metrics struct {
	keyLabel func(key string) string // nil: no key label

	wait            *prometheus.HistogramVec
	hold            *prometheus.HistogramVec
	lost            *prometheus.CounterVec
	renewals        prometheus.Counter
	renewalFailures prometheus.Counter
	renewalBatch    prometheus.Histogram

	// The gauges are counts kept here and reported at each scrape, so that
	// with a key label a series goes away when its count is back to 0
	// instead of staying forever.
	heldDesc, waitersDesc *prometheus.Desc
	mu                    sync.Mutex
	held, waiters         map[gaugeLabels]int
}

// gaugeLabels are the label values of one gauge series.
type gaugeLabels struct{ kind, key string }

// Option configures New.
type Option func(*config)

type config struct {
	keyLabel                 func(string) string
	constLabels              prometheus.Labels
	waitBuckets, holdBuckets []float64
	renewalBuckets           []float64
}

// WithKeyLabel adds a "key" label, whose value is label(key), to the metrics
// about single locks (wait, hold, held, waiters, lost). Every distinct value
// is a series of each: label must map keys to a small set of values, such
// as their prefix. It is called in the Client's hooks: it must be quick. A
// nil label uses the key itself, for a program with a few fixed keys.
func WithKeyLabel(label func(key string) string) Option {
	return func(c *config) {
		if label == nil {
			label = func(key string) string { return key }
		}
		c.keyLabel = label
	}
}

// WithConstLabels adds labels with fixed values to every metric, such as
// the name of the component whose Clients the Metrics watch, when one
// process registers several Metrics.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) { c.constLabels = labels }
}

// WithBuckets sets the histogram buckets (upper bounds, in seconds) of
// fencelock_acquire_wait_seconds and fencelock_hold_seconds. A nil slice
// keeps the default: DefaultWaitBuckets, DefaultHoldBuckets.
func WithBuckets(wait, hold []float64) Option {
	return func(c *config) {
		if wait != nil {
			c.waitBuckets = wait
		}
		if hold != nil {
			c.holdBuckets = hold
		}
	}
}

var (
	// DefaultWaitBuckets are the buckets of fencelock_acquire_wait_seconds:
	// 1 ms to about 4 minutes, ×4 each (an uncontended acquire is one round
	// trip; a contended one waits for the holder).
	DefaultWaitBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)

	// DefaultHoldBuckets are the buckets of fencelock_hold_seconds: 1 ms to
	// about 70 minutes, ×4 each.
	DefaultHoldBuckets = prometheus.ExponentialBuckets(0.001, 4, 12)

	// renewalBuckets are those of fencelock_renewal_batch_seconds: half a
	// millisecond to about 4 seconds, ×2 each (a batch is one round trip).
	renewalBuckets = prometheus.ExponentialBuckets(0.0005, 2, 14)
)

// New returns Metrics with no events counted yet. Register it with a
// prometheus.Registerer and pass Hooks to fencelock.WithHooks.
func New(opts ...Option) *Metrics {
	cfg := config{waitBuckets: DefaultWaitBuckets, holdBuckets: DefaultHoldBuckets, renewalBuckets: renewalBuckets}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	lockLabels := func(labels ...string) []string {
		if cfg.keyLabel != nil {
			labels = append(labels, "key")
		}
		return labels
	}
	m := &Metrics{
		keyLabel: cfg.keyLabel,
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "fencelock_acquire_wait_seconds",
			Help:        "Time an acquire call took, attempts and waiting included, by how it ended.",
			ConstLabels: cfg.constLabels,
			Buckets:     cfg.waitBuckets,
		}, lockLabels("kind", "outcome")),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "fencelock_hold_seconds",
			Help:        "Time a released lock was held, from the sending of its acquiring request to its release.",
			ConstLabels: cfg.constLabels,
			Buckets:     cfg.holdBuckets,
		}, lockLabels("kind")),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "fencelock_locks_lost_total",
			Help:        "Locks lost: the hold was gone, the lease deadline passed without renewal, WithMaxHold ended it, or a renewal was refused for the client's configuration.",
			ConstLabels: cfg.constLabels,
		}, lockLabels("kind", "reason")),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fencelock_renewals_total",
			Help:        "Automatic lease renewals sent.",
			ConstLabels: cfg.constLabels,
		}),
		renewalFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fencelock_renewal_failures_total",
			Help:        "Automatic lease renewals that failed: no answer from the backend (retried until the lock's deadline), or refused for the client's configuration (the lock is lost).",
			ConstLabels: cfg.constLabels,
		}),
		renewalBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "fencelock_renewal_batch_seconds",
			Help:        "Time from sending a batch of renewals (one round trip) to its answer.",
			ConstLabels: cfg.constLabels,
			Buckets:     cfg.renewalBuckets,
		}),
		heldDesc: prometheus.NewDesc("fencelock_held_locks",
			"Locks held now.", lockLabels("kind"), cfg.constLabels),
		waitersDesc: prometheus.NewDesc("fencelock_waiters",
			"Acquire calls waiting now for a lock someone else holds, or for the backend.", lockLabels("kind"), cfg.constLabels),
		held:    map[gaugeLabels]int{},
		waiters: map[gaugeLabels]int{},
	}
	if m.keyLabel == nil {
		// Without keys the series are few: show every kind from the start,
		// at 0, rather than only once it is first used.
		for _, k := range []fencelock.Kind{fencelock.KindLock, fencelock.KindSemaphore, fencelock.KindRead, fencelock.KindWrite} {
			m.held[gaugeLabels{kind: k.String()}] = 0
			m.waiters[gaugeLabels{kind: k.String()}] = 0
		}
	}
	return m
}

// Hooks returns the fencelock.Hooks that feed m. Pass them to every Client
// whose locks m is to count: fencelock.New(b, fencelock.WithHooks(m.Hooks())).
func (m *Metrics) Hooks() fencelock.Hooks {
	return fencelock.Hooks{
		AcquireDone: m.acquireDone,
		WaitStart:   func(_ context.Context, e fencelock.WaitEvent) { m.addGauge(m.waiters, e.Kind, e.Key, +1) },
		WaitDone:    func(_ context.Context, e fencelock.WaitEvent) { m.addGauge(m.waiters, e.Kind, e.Key, -1) },
		Released:    m.released,
		Lost:        m.lostLock,
		RenewalDone: m.renewalDone,
	}
}

func (m *Metrics) acquireDone(_ context.Context, e fencelock.AcquireEvent) {
	m.wait.WithLabelValues(m.labels(e.Key, e.Kind.String(), e.Outcome)...).Observe(e.Wait.Seconds())
	if e.Outcome == "acquired" {
		m.addGauge(m.held, e.Kind, e.Key, +1)
	}
}

func (m *Metrics) released(_ context.Context, e fencelock.ReleaseEvent) {
	m.hold.WithLabelValues(m.labels(e.Key, e.Kind.String())...).Observe(e.Held.Seconds())
	m.addGauge(m.held, e.Kind, e.Key, -1)
}

func (m *Metrics) lostLock(e fencelock.LostEvent) {
	m.lost.WithLabelValues(m.labels(e.Key, e.Kind.String(), e.Reason)...).Inc()
	m.addGauge(m.held, e.Kind, e.Key, -1)
}

func (m *Metrics) renewalDone(e fencelock.RenewalEvent) {
	m.renewals.Add(float64(e.Locks))
	m.renewalFailures.Add(float64(e.Failed))
	m.renewalBatch.Observe(e.Duration.Seconds())
}

// labels returns values, with the key label's value after them when m has
// one.
func (m *Metrics) labels(key string, values ...string) []string {
	if m.keyLabel != nil {
		values = append(values, m.keyLabel(key))
	}
	return values
}

// addGauge adds delta to the series of kind and key in gauge. With a key
// label, a series whose count is back to 0 is dropped.
func (m *Metrics) addGauge(gauge map[gaugeLabels]int, kind fencelock.Kind, key string, delta int) {
	l := gaugeLabels{kind: kind.String()}
	if m.keyLabel != nil {
		l.key = m.keyLabel(key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := gauge[l] + delta
	if n == 0 && m.keyLabel != nil {
		delete(gauge, l)
		return
	}
	gauge[l] = n
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.wait.Describe(ch)
	m.hold.Describe(ch)
	m.lost.Describe(ch)
	m.renewals.Describe(ch)
	m.renewalFailures.Describe(ch)
	m.renewalBatch.Describe(ch)
	ch <- m.heldDesc
	ch <- m.waitersDesc
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.wait.Collect(ch)
	m.hold.Collect(ch)
	m.lost.Collect(ch)
	m.renewals.Collect(ch)
	m.renewalFailures.Collect(ch)
	m.renewalBatch.Collect(ch)
	m.mu.Lock()
	gauges := make([]prometheus.Metric, 0, len(m.held)+len(m.waiters))
	for desc, gauge := range map[*prometheus.Desc]map[gaugeLabels]int{m.heldDesc: m.held, m.waitersDesc: m.waiters} {
		for l, n := range gauge {
			values := []string{l.kind}
			if m.keyLabel != nil {
				values = append(values, l.key)
			}
			gauges = append(gauges, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), values...))
		}
	}
	m.mu.Unlock()
	for _, g := range gauges { // outside the lock: a slow scrape must not hold up the hooks
		ch <- g
	}
}
