// Package fencelockotel turns the events of fencelock Clients into
// OpenTelemetry spans and metrics. It is a module of its own, so that
// programs that do not use OpenTelemetry do not download it.
//
// Make one Telemetry and pass its Hooks to the Clients:
//
//	tel, err := fencelockotel.New() // the global providers: otel.SetTracerProvider, otel.SetMeterProvider
//	if err != nil {
//		return err
//	}
//	defer tel.Close()
//	locks := fencelock.New(backend, fencelock.WithHooks(tel.Hooks()))
//
// Several Clients may share one Telemetry; their events add up.
//
// # Spans
//
//   - fencelock.acquire: one per acquire call (TryAcquire, Acquire, Do, each
//     key of AcquireAll, the acquires of Semaphore and RWLock, Campaign,
//     RunJob), a child of the span in the call's context, from the start of
//     the call to its end, its wait included. Attributes: fencelock.kind,
//     fencelock.outcome, fencelock.attempts, and fencelock.fence when
//     acquired. A call that waited has the events fencelock.wait (it began
//     to wait) and fencelock.wait_done (with fencelock.waited_seconds).
//     Its status is Error, with the error's text, for the outcomes that are
//     failures of the store or of the program ("unavailable",
//     "misconfigured", "invalid"); "not_acquired" (contention), "canceled"
//     and "closed" are the caller's business and leave it unset.
//   - fencelock.lost: a lock was lost. The lease keeper finds most losses,
//     outside any call, so it is a root span (a child of the hold span with
//     WithHoldSpans), of no duration, with status Error and the attributes
//     fencelock.kind, fencelock.fence, fencelock.reason ("gone",
//     "deadline", "max_hold", "refused") and fencelock.held_seconds.
//   - fencelock.force_release: one per hold that Client.ForceRelease freed,
//     a child of the span in the operator's context, of no duration, with
//     fencelock.kind, fencelock.fence and fencelock.reason (the operator's
//     reason).
//   - fencelock.hold, with WithHoldSpans only: from the acquisition of a lock
//     to its release or loss, a sibling of its fencelock.acquire span (the
//     child of the caller's span), linked to it. A hold can last hours, and
//     most tracing backends keep a trace only once its spans have ended:
//     leave it off unless your holds are short.
//
// Lock keys are not an attribute by default: they may be sensitive (a user's
// e-mail in "user:alice@example.com") and they are a value per lock.
// WithKeyAttribute adds fencelock.key to the spans, through a function of
// your choice.
//
// # Metrics
//
// The metrics are those of the fencelockprom module, with the same names,
// units, label names and values once exported to Prometheus (the OTel
// Prometheus exporter turns "fencelock.acquire.wait" in seconds into
// fencelock_acquire_wait_seconds, a counter "fencelock.locks.lost" into
// fencelock_locks_lost_total):
//
//	fencelock.acquire.wait{kind,outcome}  histogram, s          time an acquire call took, attempts and waiting included, by how it ended
//	fencelock.hold{kind}                  histogram, s          time a released lock was held, from the sending of its acquiring request to its release
//	fencelock.held_locks{kind}            up-down counter       locks held now
//	fencelock.waiters{kind}               up-down counter       acquire calls waiting now for a lock someone else holds (or for the backend)
//	fencelock.locks.lost{kind,reason}     counter               locks lost
//	fencelock.renewals                    counter               automatic lease renewals sent
//	fencelock.renewal_failures            counter               of those, renewals that failed
//	fencelock.renewal_batch               histogram, s          time from sending a batch of renewals (one round trip) to its answer
//
// The attributes are named as fencelockprom's labels (kind, outcome, reason,
// key), not fencelock.kind as on the spans, so that dashboards and alerts
// work on either. The OTel Prometheus exporter adds otel_scope_* labels and
// a target_info metric unless given WithoutScopeInfo and WithoutTargetInfo.
// WithKeyLabel adds a "key" attribute to the metrics about single locks, as
// fencelockprom.WithKeyLabel does.
package fencelockotel

import (
	"context"

	"github.com/fencelock/fencelock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the Tracer and the Meter.
const ScopeName = "github.com/fencelock/fencelock/fencelockotel"

// Telemetry makes OpenTelemetry spans and metrics of the events of
// fencelock Clients, through the Hooks it returns. Its methods are safe for
// concurrent use.
type Telemetry struct {
	tracer    trace.Tracer
	keyAttr   func(key string) string // nil: no fencelock.key on the spans
	holdSpans bool
	holds     holdSpans // WithHoldSpans: the open hold spans

	metrics
}

// Option configures New.
type Option func(*config)

type config struct {
	tracerProvider           trace.TracerProvider
	meterProvider            metric.MeterProvider
	keyAttr, keyLabel        func(string) string
	holdSpans                bool
	waitBuckets, holdBuckets []float64
}

// WithTracerProvider sets the provider of the spans' Tracer. Default: the
// global one (otel.GetTracerProvider), as it is when New is called (a
// global provider set later is used too: the global one delegates to it).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithMeterProvider sets the provider of the metrics' Meter. Default: the
// global one (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithKeyAttribute adds the attribute fencelock.key, whose value is
// attr(key), to the spans. A nil attr uses the key itself. Keys may carry
// what a trace should not (a user's name or e-mail): map them to what may
// be shown, such as their prefix. attr is called in the Client's hooks: it
// must be quick.
func WithKeyAttribute(attr func(key string) string) Option {
	return func(c *config) {
		if attr == nil {
			attr = func(key string) string { return key }
		}
		c.keyAttr = attr
	}
}

// WithKeyLabel adds a "key" attribute, whose value is label(key), to the
// metrics about single locks (acquire.wait, hold, held_locks, waiters,
// locks.lost), as fencelockprom.WithKeyLabel does. Every distinct value is
// a series of each: label must map keys to a small set of values, such as
// their prefix. A nil label uses the key itself, for a program with a few
// fixed keys.
func WithKeyLabel(label func(key string) string) Option {
	return func(c *config) {
		if label == nil {
			label = func(key string) string { return key }
		}
		c.keyLabel = label
	}
}

// WithHoldSpans adds a span fencelock.hold over each hold of a lock, from
// its acquisition to its release or loss. Off by default: a span open for a
// whole hold keeps its trace incomplete for as long (see the package
// documentation).
func WithHoldSpans() Option {
	return func(c *config) { c.holdSpans = true }
}

// WithBuckets sets the histogram buckets (upper bounds, in seconds) of
// fencelock.acquire.wait and fencelock.hold. A nil slice keeps the default:
// DefaultWaitBuckets, DefaultHoldBuckets, those of fencelockprom.
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

// New returns a Telemetry with no events counted yet. Pass its Hooks to
// fencelock.WithHooks. It returns an error when the Meter refuses an
// instrument (with the global providers and the SDK's, it does not).
func New(opts ...Option) (*Telemetry, error) {
	cfg := config{waitBuckets: DefaultWaitBuckets, holdBuckets: DefaultHoldBuckets}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if cfg.tracerProvider == nil {
		cfg.tracerProvider = otel.GetTracerProvider()
	}
	if cfg.meterProvider == nil {
		cfg.meterProvider = otel.GetMeterProvider()
	}
	t := &Telemetry{
		tracer:    cfg.tracerProvider.Tracer(ScopeName),
		keyAttr:   cfg.keyAttr,
		holdSpans: cfg.holdSpans,
	}
	if err := t.metrics.init(cfg.meterProvider.Meter(ScopeName), cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// Close stops reporting the gauges (held_locks, waiters) to the Meter. The
// hooks may still be called; their spans and other metrics are still made.
func (t *Telemetry) Close() error {
	if t.registration == nil {
		return nil
	}
	return t.registration.Unregister()
}

// Hooks returns the fencelock.Hooks that feed t. Pass them to every Client
// whose locks t is to follow: fencelock.New(b, fencelock.WithHooks(t.Hooks())).
func (t *Telemetry) Hooks() fencelock.Hooks {
	return fencelock.Hooks{
		AcquireStart:  t.startAcquireSpan,
		WaitStart:     t.waitStart,
		WaitDone:      t.waitDone,
		AcquireDone:   t.acquireDone,
		Released:      t.released,
		ForceReleased: t.forceReleaseSpan,
		Lost:          t.lost,
		RenewalDone:   t.recordRenewals,
	}
}

func (t *Telemetry) waitStart(ctx context.Context, e fencelock.WaitEvent) {
	t.addWaiter(e, +1)
	t.spanWaitStart(ctx)
}

func (t *Telemetry) waitDone(ctx context.Context, e fencelock.WaitEvent) {
	t.addWaiter(e, -1)
	t.spanWaitDone(ctx, e)
}

func (t *Telemetry) acquireDone(ctx context.Context, e fencelock.AcquireEvent) {
	t.recordAcquire(ctx, e)
	t.endAcquireSpan(ctx, e)
}

func (t *Telemetry) released(ctx context.Context, e fencelock.ReleaseEvent) {
	t.recordRelease(ctx, e)
	t.endHoldSpan(e.Kind, e.Key, e.Fence, nil)
}

func (t *Telemetry) lost(e fencelock.LostEvent) {
	t.recordLost(e)
	t.lostSpan(e)
}
