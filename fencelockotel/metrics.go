package fencelockotel

import (
	"context"
	"sync"

	"github.com/fencelock/fencelock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

var (
	// DefaultWaitBuckets are the buckets of fencelock.acquire.wait, those
	// of fencelockprom: 1 ms to about 4 minutes, ×4 each.
	DefaultWaitBuckets = exponentialBuckets(0.001, 4, 10)

	// DefaultHoldBuckets are the buckets of fencelock.hold, those of
	// fencelockprom: 1 ms to about 70 minutes, ×4 each.
	DefaultHoldBuckets = exponentialBuckets(0.001, 4, 12)

	// renewalBuckets are those of fencelock.renewal_batch: half a
	// millisecond to about 4 seconds, ×2 each.
	renewalBuckets = exponentialBuckets(0.0005, 2, 14)
)

// exponentialBuckets returns count bounds from start, each factor times
// the one before, as prometheus.ExponentialBuckets does.
func exponentialBuckets(start, factor float64, count int) []float64 {
	buckets := make([]float64, count)
	for i := range buckets {
		buckets[i] = start
		start *= factor
	}
	return buckets
}

// metrics are Telemetry's instruments.
type metrics struct {
	keyLabel func(key string) string // nil: no key attribute

	wait, hold, renewalBatch  metric.Float64Histogram
	lost                      metric.Int64Counter
	renewals, renewalFailures metric.Int64Counter
	registration              metric.Registration // the gauges' callback

	// The gauges are counts kept here and observed at each collection, so
	// that with a key label a series goes away when its count is back to
	// 0, as with fencelockprom.
	mu            sync.Mutex
	held, waiters map[gaugeLabels]int64
}

// gaugeLabels are the attribute values of one gauge series.
type gaugeLabels struct{ kind, key string }

// The metric attributes, named as fencelockprom's labels.
const (
	labelKind    = attribute.Key("kind")
	labelOutcome = attribute.Key("outcome")
	labelReason  = attribute.Key("reason")
	labelKey     = attribute.Key("key")
)

// init makes the instruments on meter. The descriptions are fencelockprom's
// help texts.
func (m *metrics) init(meter metric.Meter, cfg config) error {
	m.keyLabel = cfg.keyLabel
	m.held, m.waiters = map[gaugeLabels]int64{}, map[gaugeLabels]int64{}
	if m.keyLabel == nil {
		// Without keys the series are few: show every kind from the start,
		// at 0.
		for _, k := range []fencelock.Kind{fencelock.KindLock, fencelock.KindSemaphore, fencelock.KindRead, fencelock.KindWrite} {
			m.held[gaugeLabels{kind: k.String()}] = 0
			m.waiters[gaugeLabels{kind: k.String()}] = 0
		}
	}
	var err, e error
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, e := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		err = firstErr(err, e)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, e := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = firstErr(err, e)
		return c
	}
	m.wait = histogram("fencelock.acquire.wait",
		"Time an acquire call took, attempts and waiting included, by how it ended.", cfg.waitBuckets)
	m.hold = histogram("fencelock.hold",
		"Time a released lock was held, from the sending of its acquiring request to its release.", cfg.holdBuckets)
	m.renewalBatch = histogram("fencelock.renewal_batch",
		"Time from sending a batch of renewals (one round trip) to its answer.", renewalBuckets)
	m.lost = counter("fencelock.locks.lost", "{lock}",
		"Locks lost: the hold was gone, the lease deadline passed without renewal, WithMaxHold ended it, or a renewal was refused for the client's configuration.")
	m.renewals = counter("fencelock.renewals", "{renewal}", "Automatic lease renewals sent.")
	m.renewalFailures = counter("fencelock.renewal_failures", "{renewal}",
		"Automatic lease renewals that failed: no answer from the backend (retried until the lock's deadline), or refused for the client's configuration (the lock is lost).")
	held, e := meter.Int64ObservableUpDownCounter("fencelock.held_locks", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held now."))
	err = firstErr(err, e)
	waiters, e := meter.Int64ObservableUpDownCounter("fencelock.waiters", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls waiting now for a lock someone else holds, or for the backend."))
	err = firstErr(err, e)
	if err != nil {
		return err
	}
	m.registration, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.observe(o, held, m.held)
		m.observe(o, waiters, m.waiters)
		return nil
	}, held, waiters)
	if err != nil {
		return err
	}
	// The renewal counters exist from the start, at 0, as fencelockprom's.
	m.renewals.Add(context.Background(), 0)
	m.renewalFailures.Add(context.Background(), 0)
	return nil
}

func firstErr(err, e error) error {
	if err != nil {
		return err
	}
	return e
}

// attrs returns the attribute set of kind and the other values, with the
// key attribute after them when m has one.
func (m *metrics) attrs(key string, kv ...attribute.KeyValue) metric.MeasurementOption {
	if m.keyLabel != nil {
		kv = append(kv, labelKey.String(m.keyLabel(key)))
	}
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

func (m *metrics) recordAcquire(ctx context.Context, e fencelock.AcquireEvent) {
	m.wait.Record(ctx, e.Wait.Seconds(), m.attrs(e.Key, labelKind.String(e.Kind.String()), labelOutcome.String(e.Outcome)))
	if e.Outcome == "acquired" {
		m.addGauge(m.held, e.Kind, e.Key, +1)
	}
}

func (m *metrics) recordRelease(ctx context.Context, e fencelock.ReleaseEvent) {
	m.hold.Record(ctx, e.Held.Seconds(), m.attrs(e.Key, labelKind.String(e.Kind.String())))
	m.addGauge(m.held, e.Kind, e.Key, -1)
}

func (m *metrics) recordLost(e fencelock.LostEvent) {
	m.lost.Add(context.Background(), 1, m.attrs(e.Key, labelKind.String(e.Kind.String()), labelReason.String(e.Reason)))
	m.addGauge(m.held, e.Kind, e.Key, -1)
}

func (m *metrics) recordRenewals(e fencelock.RenewalEvent) {
	ctx := context.Background()
	m.renewals.Add(ctx, int64(e.Locks))
	m.renewalFailures.Add(ctx, int64(e.Failed))
	m.renewalBatch.Record(ctx, e.Duration.Seconds())
}

func (m *metrics) addWaiter(e fencelock.WaitEvent, delta int64) {
	m.addGauge(m.waiters, e.Kind, e.Key, delta)
}

// addGauge adds delta to the series of kind and key in gauge. With a key
// label, a series whose count is back to 0 is dropped.
func (m *metrics) addGauge(gauge map[gaugeLabels]int64, kind fencelock.Kind, key string, delta int64) {
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

// observe reports the series of gauge to o, as inst.
func (m *metrics) observe(o metric.Observer, inst metric.Int64Observable, gauge map[gaugeLabels]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for l, n := range gauge {
		kv := []attribute.KeyValue{labelKind.String(l.kind)}
		if m.keyLabel != nil {
			kv = append(kv, labelKey.String(l.key))
		}
		o.ObserveInt64(inst, n, metric.WithAttributeSet(attribute.NewSet(kv...)))
	}
}
