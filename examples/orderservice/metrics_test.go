package main

import (
	"strings"
	"testing"
	"time"
)

func TestMetricsFormat(t *testing.T) {
	m := NewMetrics(true)
	m.ObserveRequest("POST /api/orders", 201)
	m.ObserveRequest("POST /api/orders", 201)
	m.ObserveRequest(`odd "route"`+"\n", 500)
	m.ObserveLock(outcomeAcquired, 3*time.Millisecond)
	m.ObserveLock(outcomeAcquired, 20*time.Second) // beyond the last bucket
	m.ObserveLock(outcomeBusy, 2*time.Second)
	m.ObserveLock(outcomeUnavailable, 300*time.Millisecond)
	var b strings.Builder
	m.WriteTo(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE orderservice_http_requests_total counter\n",
		`orderservice_http_requests_total{route="POST /api/orders",code="201"} 2` + "\n",
		`orderservice_http_requests_total{route="odd \"route\"\n",code="500"} 1` + "\n",
		"# TYPE orderservice_lock_wait_seconds histogram\n",
		`orderservice_lock_wait_seconds_bucket{outcome="acquired",le="0.0025"} 0` + "\n",
		`orderservice_lock_wait_seconds_bucket{outcome="acquired",le="0.005"} 1` + "\n",
		`orderservice_lock_wait_seconds_bucket{outcome="acquired",le="10"} 1` + "\n",
		`orderservice_lock_wait_seconds_bucket{outcome="acquired",le="+Inf"} 2` + "\n",
		`orderservice_lock_wait_seconds_sum{outcome="acquired"} 20.003` + "\n",
		`orderservice_lock_wait_seconds_count{outcome="acquired"} 2` + "\n",
		`orderservice_lock_wait_seconds_bucket{outcome="busy",le="2.5"} 1` + "\n",
		`orderservice_lock_acquire_total{outcome="busy"} 1` + "\n",
		`orderservice_lock_wait_seconds_bucket{outcome="unavailable",le="0.5"} 1` + "\n",
		`orderservice_lock_acquire_total{outcome="unavailable"} 1` + "\n",
		`orderservice_lock_acquire_total{outcome="error"} 0` + "\n",
		"orderservice_no_lock_mode 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// Every sample line is "name{labels} value" or "name value".
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.Count(line, " ") < 1 || !strings.HasPrefix(line, "orderservice_") {
			t.Errorf("malformed sample %q", line)
		}
	}
}
