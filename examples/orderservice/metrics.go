package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Lock acquisition outcomes, the values of the outcome label.
const (
	outcomeAcquired    = "acquired"    // the lock was had
	outcomeBusy        = "busy"        // held by another request past the configured wait: 503 busy
	outcomeUnavailable = "unavailable" // Redis could not be reached or did not answer in time: 503 unavailable
	outcomeError       = "error"       // the request was cancelled, the client is closing, or another error
)

var lockOutcomes = []string{outcomeAcquired, outcomeBusy, outcomeUnavailable, outcomeError}

// lockWaitBuckets are the upper bounds, in seconds, of the lock wait
// histogram.
var lockWaitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Metrics counts what /metrics reports, in the Prometheus text format
// (written by hand: no client library). It is safe for concurrent use.
type Metrics struct {
	noLock bool

	mu       sync.Mutex
	requests map[routeStatus]uint64
	waits    map[string]*histogram // by outcome
	acquires map[string]uint64     // by outcome
}

type routeStatus struct {
	route  string
	status int
}

type histogram struct {
	counts []uint64 // per bucket, not cumulative; the last one is +Inf
	sum    float64
	count  uint64
}

// NewMetrics returns empty metrics. noLock is exported as a gauge so that a
// dashboard shows when an instance runs the --no-lock demonstration.
func NewMetrics(noLock bool) *Metrics {
	m := &Metrics{
		noLock:   noLock,
		requests: map[routeStatus]uint64{},
		waits:    map[string]*histogram{},
		acquires: map[string]uint64{},
	}
	for _, o := range lockOutcomes {
		m.waits[o] = &histogram{counts: make([]uint64, len(lockWaitBuckets)+1)}
		m.acquires[o] = 0
	}
	return m
}

// ObserveRequest counts a response by route pattern (such as
// "POST /api/orders", or "unmatched") and status code.
func (m *Metrics) ObserveRequest(route string, status int) {
	m.mu.Lock()
	m.requests[routeStatus{route, status}]++
	m.mu.Unlock()
}

// ObserveLock counts a lock acquisition and how long it waited.
func (m *Metrics) ObserveLock(outcome string, wait time.Duration) {
	sec := wait.Seconds()
	i, _ := slices.BinarySearch(lockWaitBuckets, sec) // first bucket with bound >= sec
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.waits[outcome]
	if h == nil {
		return
	}
	h.counts[i]++
	h.sum += sec
	h.count++
	m.acquires[outcome]++
}

// WriteTo writes the metrics in the Prometheus text exposition format.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	m.mu.Lock()
	b.WriteString("# HELP orderservice_http_requests_total HTTP requests answered, by route pattern and status code.\n")
	b.WriteString("# TYPE orderservice_http_requests_total counter\n")
	keys := make([]routeStatus, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b routeStatus) int {
		if c := strings.Compare(a.route, b.route); c != 0 {
			return c
		}
		return a.status - b.status
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "orderservice_http_requests_total{route=%s,code=\"%d\"} %d\n", labelValue(k.route), k.status, m.requests[k])
	}

	b.WriteString("# HELP orderservice_lock_wait_seconds Time from asking for a lock to holding it or giving up, by outcome.\n")
	b.WriteString("# TYPE orderservice_lock_wait_seconds histogram\n")
	for _, o := range lockOutcomes {
		h := m.waits[o]
		var cum uint64
		for i, bound := range lockWaitBuckets {
			cum += h.counts[i]
			fmt.Fprintf(&b, "orderservice_lock_wait_seconds_bucket{outcome=%q,le=%q} %d\n", o, formatFloat(bound), cum)
		}
		cum += h.counts[len(lockWaitBuckets)]
		fmt.Fprintf(&b, "orderservice_lock_wait_seconds_bucket{outcome=%q,le=\"+Inf\"} %d\n", o, cum)
		fmt.Fprintf(&b, "orderservice_lock_wait_seconds_sum{outcome=%q} %s\n", o, formatFloat(h.sum))
		fmt.Fprintf(&b, "orderservice_lock_wait_seconds_count{outcome=%q} %d\n", o, h.count)
	}

	b.WriteString("# HELP orderservice_lock_acquire_total Lock acquisitions by outcome: acquired, busy (held by another request past the configured wait), unavailable (Redis could not be reached) or error.\n")
	b.WriteString("# TYPE orderservice_lock_acquire_total counter\n")
	for _, o := range lockOutcomes {
		fmt.Fprintf(&b, "orderservice_lock_acquire_total{outcome=%q} %d\n", o, m.acquires[o])
	}
	m.mu.Unlock()

	b.WriteString("# HELP orderservice_no_lock_mode 1 while the instance runs with --no-lock, a demonstration of the failure.\n")
	b.WriteString("# TYPE orderservice_no_lock_mode gauge\n")
	if m.noLock {
		b.WriteString("orderservice_no_lock_mode 1\n")
	} else {
		b.WriteString("orderservice_no_lock_mode 0\n")
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// ServeHTTP serves the metrics.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.WriteTo(w)
}

// labelValue quotes a label value: backslash, double quote and newline are
// escaped as the format requires.
func labelValue(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
