package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
)

// With Redis down, a deduction and an order are answered 503 unavailable
// with Retry-After, not 503 busy: nobody holds the product's lock, it just
// cannot be asked for. Nothing is written, the metrics count the lock
// outcome as unavailable (not busy, not error), and a finished order is
// still replayed from its record. Failed attempts reported as
// ErrNotAcquired would be taken for contention and answered 503 busy ("the
// lock was not free within 300ms").
func TestRedisDownIsUnavailable(t *testing.T) {
	cfg, srv := testConfigRedis(t)
	cfg.LockWait = 300 * time.Millisecond
	app, ts, logs := newTestApp(t, cfg)
	ctx := context.Background()
	p := createProduct(t, ts.URL, 5)
	order := func(no string) string {
		return fmt.Sprintf(`{"requestNo":%q,"productId":%d,"count":1}`, no, p.ID)
	}
	// An order while Redis is up, so that the pools hold connections, as in
	// a service that has been running.
	done := call(t, "POST", ts.URL+"/api/orders", order("DONE-1"))
	if done.status != http.StatusCreated {
		t.Fatalf("order before the outage: %d %s", done.status, done.body)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct{ path, body string }{
		{fmt.Sprintf("/api/stock/%d/deduct?count=1", p.ID), ""},
		{"/api/orders", order("NEW-1")},
	} {
		r := call(t, "POST", ts.URL+req.path, req.body)
		if r.status != http.StatusServiceUnavailable {
			t.Errorf("POST %s with Redis down: %d %s, want 503 %s", req.path, r.status, r.body, CodeUnavailable)
			continue
		}
		if e := r.apiErr(t); e.Code != CodeUnavailable || !strings.Contains(e.Message, "lock service could not be reached") {
			t.Errorf("POST %s with Redis down: %+v, want code %s (not %s) saying the lock service could not be reached",
				req.path, e, CodeUnavailable, CodeBusy)
		}
		if r.header.Get("Retry-After") == "" {
			t.Errorf("POST %s: 503 %s without Retry-After", req.path, CodeUnavailable)
		}
	}

	// Nothing was written.
	if got, err := app.store.Product(ctx, p.ID); err != nil || got.Stock != 4 {
		t.Errorf("stock %d (%v) after the outage, want 4 (only DONE-1's item sold)", got.Stock, err)
	}
	if rec, found, err := app.store.Idempotency().Get(ctx, orderScope, "NEW-1"); err != nil || found {
		t.Errorf("record of NEW-1: %+v found=%v (%v), want none", rec, found, err)
	}
	// A finished order needs no lock: it is replayed.
	again := call(t, "POST", ts.URL+"/api/orders", order("DONE-1"))
	if again.status != http.StatusCreated || again.header.Get(HeaderReplayed) != "true" || !bytes.Equal(again.body, done.body) {
		t.Errorf("DONE-1 with Redis down: %d %q %s, want its body replayed", again.status, again.header.Get(HeaderReplayed), again.body)
	}

	m := string(call(t, "GET", ts.URL+"/metrics", "").body)
	for _, want := range []string{
		`orderservice_lock_acquire_total{outcome="unavailable"} 2`,
		`orderservice_lock_acquire_total{outcome="busy"} 0`,
		`orderservice_lock_acquire_total{outcome="error"} 0`,
		`orderservice_lock_wait_seconds_count{outcome="unavailable"} 2`,
		`orderservice_http_requests_total{route="POST /api/orders",code="503"} 1`,
		`orderservice_http_requests_total{route="POST /api/stock/{id}/deduct",code="503"} 1`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, m)
		}
	}
	for _, msg := range []string{"deduct", "create_order"} {
		if !hasLogLine(logs.String(), map[string]any{"msg": msg, "lock_outcome": outcomeUnavailable, "outcome": "unavailable"}) {
			t.Errorf("no %s log line with lock_outcome and outcome unavailable", msg)
		}
	}

	// Redis back (empty, as after a restart without persistence): the
	// order goes through. This also lets the lock client's clean-up of the
	// attempts that got no answer finish before the app closes.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	r := call(t, "POST", ts.URL+"/api/orders", order("NEW-1"))
	if r.status != http.StatusCreated || r.header.Get(HeaderReplayed) != "" {
		t.Errorf("NEW-1 after Redis came back: %d %s, want 201 created", r.status, r.body)
	}
}

// The idempotency guard's error for an unreachable Redis (its request
// lock) is answered like the product lock's: 503 unavailable, not 409
// in_progress. The guard is the app's own, on the stopped server; were its
// error idempotency.ErrInProgress here, the service would answer 409
// in_progress.
func TestGuardUnavailableIsAnswered503(t *testing.T) {
	cfg, srv := testConfigRedis(t)
	app, _, _ := newTestApp(t, cfg)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := app.guard.Do(context.Background(), orderScope, "G-1", func(context.Context, *sql.Tx) ([]byte, error) {
		ran = true
		return nil, nil
	})
	if ran || !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, idempotency.ErrUnavailable) || errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("guard with Redis down: ran=%v, %v; want an error matching fencelock.ErrUnavailable and not ErrInProgress, and no run", ran, err)
	}
	if got := outcomeOf(err); got != "unavailable" {
		t.Errorf("outcome %q for %v, want unavailable", got, err)
	}
	w := httptest.NewRecorder()
	app.writeDomainError(w, httptest.NewRequest("POST", "/api/orders", nil), classifyLockError(err))
	r := reply{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
	if r.status != http.StatusServiceUnavailable || r.apiErr(t).Code != CodeUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("the guard's error answered %d %s (Retry-After %q), want 503 %s with Retry-After",
			r.status, r.body, r.header.Get("Retry-After"), CodeUnavailable)
	}
	if err := srv.Restart(); err != nil { // lets the lock client's clean-up finish
		t.Fatal(err)
	}
}
