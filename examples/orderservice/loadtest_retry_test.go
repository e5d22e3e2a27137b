package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A lock wait too short for the load makes requests 503 busy: that is
// availability, reported, and the run still passes when nothing was
// oversold and no order was duplicated, not a FAIL for fewer successes
// than stock or busy responses in phase 2.
func TestLoadtestShortLockWaitIsNotFail(t *testing.T) {
	cfg := smallLoadtest(t)
	cfg.Requests, cfg.Stock = 200, 200 // every busy request is a sale missed
	cfg.LockWait = 0                   // busy at once when held
	cfg.WorkDelay = 5 * time.Millisecond
	cfg.Retries = 0 // take the first answer: busy answers are certain
	rep := runLoadtest(t, cfg)
	d, o := rep.Deduct, rep.Orders
	if !rep.Pass || !d.Pass || !o.Pass {
		t.Fatalf("FAIL with a short lock wait: %v %v %v", d.Failures, o.Failures, rep.Failures)
	}
	if d.Busy == 0 || len(d.Availability) == 0 || !strings.Contains(d.Availability[0], "busy") {
		t.Errorf("phase 1: busy %d, availability %q: want busy answers reported", d.Busy, d.Availability)
	}
	if d.Successes+d.Busy != cfg.Requests || d.FinalStock != int64(cfg.Stock-d.Successes) || d.OrderRows != int64(d.Successes) {
		t.Errorf("phase 1: %+v", d)
	}
	if o.DuplicateOrders != 0 || o.MismatchedBody != 0 {
		t.Errorf("phase 2: %+v", o)
	}
	var b strings.Builder
	rep.Print(&b)
	if !strings.Contains(b.String(), "availability (not a failure)") || !strings.Contains(b.String(), "RESULT: PASS") {
		t.Errorf("report:\n%s", b.String())
	}
}

// doRetry sends a request again after a 503 with Retry-After, up to the
// configured retries, and not after a 503 without it or another status.
func TestDoRetryHonoursRetryAfter(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/no-header":
			w.WriteHeader(http.StatusServiceUnavailable)
		case n <= 2:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	in := &instance{addr: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()
	for _, tc := range []struct {
		retries, wantRetries, wantStatus, wantCalls int
		path                                        string
	}{
		{3, 2, http.StatusOK, 3, "/"},
		{1, 1, http.StatusServiceUnavailable, 2, "/"},
		{3, 0, http.StatusServiceUnavailable, 1, "/no-header"},
	} {
		calls.Store(0)
		lt := &loadtest{cfg: LoadtestConfig{Retries: tc.retries}, client: srv.Client()}
		r, n := lt.doRetry(ctx, in, http.MethodPost, tc.path, nil)
		if r.status != tc.wantStatus || n != tc.wantRetries || calls.Load() != int64(tc.wantCalls) {
			t.Errorf("retries %d, %s: status %d after %d retries (%d calls), want %d after %d (%d calls)",
				tc.retries, tc.path, r.status, n, calls.Load(), tc.wantStatus, tc.wantRetries, tc.wantCalls)
		}
	}
}
