package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

func TestDeductBadRequests(t *testing.T) {
	_, ts, _ := newTestApp(t, testConfig(t))
	p := createProduct(t, ts.URL, 10)
	for _, tc := range []struct {
		path, code, mention string
	}{
		{fmt.Sprintf("/api/stock/%d/deduct", p.ID), CodeInvalidCount, "missing query parameter count"},
		{fmt.Sprintf("/api/stock/%d/deduct?count=", p.ID), CodeInvalidCount, `""`},
		{fmt.Sprintf("/api/stock/%d/deduct?count=0", p.ID), CodeInvalidCount, `"0"`},
		{fmt.Sprintf("/api/stock/%d/deduct?count=-3", p.ID), CodeInvalidCount, `"-3"`},
		{fmt.Sprintf("/api/stock/%d/deduct?count=abc", p.ID), CodeInvalidCount, `"abc"`},
		{fmt.Sprintf("/api/stock/%d/deduct?count=1.5", p.ID), CodeInvalidCount, `"1.5"`},
		{fmt.Sprintf("/api/stock/%d/deduct?count=99999999999999999999", p.ID), CodeInvalidCount, `"99999999999999999999"`},
		{"/api/stock/abc/deduct?count=1", CodeInvalidProductID, `"abc"`},
		{"/api/stock/0/deduct?count=1", CodeInvalidProductID, `"0"`},
	} {
		r := call(t, "POST", ts.URL+tc.path, "")
		if r.status != http.StatusBadRequest {
			t.Errorf("POST %s: status %d, want 400; body %s", tc.path, r.status, r.body)
			continue
		}
		e := r.apiErr(t)
		if e.Code != tc.code || !strings.Contains(e.Message, tc.mention) {
			t.Errorf("POST %s: %+v, want code %s and a message naming %s", tc.path, e, tc.code, tc.mention)
		}
	}
	// Nothing was sold.
	r := call(t, "GET", fmt.Sprintf("%s/api/products/%d", ts.URL, p.ID), "")
	var got Product
	json.Unmarshal(r.body, &got)
	if got.Stock != 10 {
		t.Errorf("stock %d after bad requests, want 10", got.Stock)
	}
}

func TestUnknownProduct(t *testing.T) {
	cfg := testConfig(t)
	_, ts, _ := newTestApp(t, cfg)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/stock/4242/deduct?count=1", ""},
		{"GET", "/api/products/4242", ""},
		{"POST", "/api/orders", `{"requestNo":"R-1","productId":4242,"count":1}`},
	} {
		r := call(t, c.method, ts.URL+c.path, c.body)
		if r.status != http.StatusNotFound || r.apiErr(t).Code != CodeProductNotFound {
			t.Errorf("%s %s: %d %s, want 404 %s", c.method, c.path, r.status, r.body, CodeProductNotFound)
		}
	}
	// No lock was taken for it: a lock leaves a fence counter in Redis for
	// good, so made-up ids must not reach the lock.
	opts, _ := redis.ParseURL(cfg.RedisURL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if keys, err := rdb.Keys(context.Background(), "*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("Redis keys after requests for an unknown product: %v (%v), want none", keys, err)
	}
}

func TestDeductAndInsufficientStock(t *testing.T) {
	app, ts, _ := newTestApp(t, testConfig(t))
	p := createProduct(t, ts.URL, 1)
	path := fmt.Sprintf("%s/api/stock/%d/deduct", ts.URL, p.ID)

	r := call(t, "POST", path+"?count=2", "")
	if r.status != http.StatusConflict || r.apiErr(t).Code != CodeInsufficientStock {
		t.Fatalf("count 2 of 1: %d %s, want 409 %s", r.status, r.body, CodeInsufficientStock)
	}
	r = call(t, "POST", path+"?count=1", "", HeaderRequestID, "client-req-1")
	if r.status != http.StatusOK {
		t.Fatalf("count 1 of 1: %d %s", r.status, r.body)
	}
	var o Order
	if err := json.Unmarshal(r.body, &o); err != nil {
		t.Fatal(err)
	}
	if o.ProductID != p.ID || o.Count != 1 || o.Fence <= 0 || o.RequestID != "client-req-1" || o.ID <= 0 {
		t.Errorf("order %+v: want product %d, count 1, a positive fence, request id client-req-1", o, p.ID)
	}
	if got := r.header.Get(HeaderRequestID); got != "client-req-1" {
		t.Errorf("%s %q, want the client's", HeaderRequestID, got)
	}
	r = call(t, "POST", path+"?count=1", "")
	if r.status != http.StatusConflict || r.apiErr(t).Code != CodeInsufficientStock {
		t.Fatalf("count 1 of 0: %d %s, want 409", r.status, r.body)
	}
	orders, items, err := app.store.OrderStats(context.Background(), p.ID)
	if err != nil || orders != 1 || items != 1 {
		t.Errorf("orders %d, items %d (%v), want 1 and 1", orders, items, err)
	}
}

// lockClient returns another fencelock client on the app's Redis and
// namespace, as another instance would have.
func lockClient(t *testing.T, cfg Config) *fencelock.Client {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	c := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace(cfg.Namespace))
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c
}

func TestDeductBusy(t *testing.T) {
	cfg := testConfig(t)
	cfg.LockWait = 100 * time.Millisecond
	_, ts, _ := newTestApp(t, cfg)
	p := createProduct(t, ts.URL, 5)
	other := lockClient(t, cfg)
	ctx := context.Background()
	held, err := other.TryAcquire(ctx, fmt.Sprintf("product:%d", p.ID), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	r := call(t, "POST", fmt.Sprintf("%s/api/stock/%d/deduct?count=1", ts.URL, p.ID), "")
	if r.status != http.StatusServiceUnavailable || r.apiErr(t).Code != CodeBusy {
		t.Fatalf("deduct while another instance holds the lock: %d %s, want 503 %s", r.status, r.body, CodeBusy)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("503 busy without Retry-After")
	}
	if waited := time.Since(start); waited < cfg.LockWait || waited > 5*time.Second {
		t.Errorf("answered after %v, want about the lock wait %v", waited, cfg.LockWait)
	}

	held.Release(ctx)
	r = call(t, "POST", fmt.Sprintf("%s/api/stock/%d/deduct?count=1", ts.URL, p.ID), "")
	var o Order
	if r.status != http.StatusOK || json.Unmarshal(r.body, &o) != nil {
		t.Fatalf("deduct after the release: %d %s", r.status, r.body)
	}
	if o.Fence <= held.Fence() {
		t.Errorf("order fence %d, want more than the earlier holder's %d", o.Fence, held.Fence())
	}

	m := call(t, "GET", ts.URL+"/metrics", "")
	for _, want := range []string{
		`orderservice_lock_acquire_total{outcome="busy"} 1`,
		`orderservice_lock_acquire_total{outcome="acquired"} 1`,
		`orderservice_http_requests_total{route="POST /api/stock/{id}/deduct",code="503"} 1`,
		`orderservice_http_requests_total{route="POST /api/stock/{id}/deduct",code="200"} 1`,
		`orderservice_lock_wait_seconds_count{outcome="busy"} 1`,
		`orderservice_lock_wait_seconds_bucket{outcome="busy",le="+Inf"} 1`,
		`orderservice_no_lock_mode 0`,
	} {
		if !strings.Contains(string(m.body), want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, m.body)
		}
	}
	if ct := m.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("/metrics Content-Type %q", ct)
	}
}

// A holder that lost its lock (a newer fence wrote the product) cannot
// write: the store refuses its fence.
func TestStaleFenceRefused(t *testing.T) {
	app, ts, _ := newTestApp(t, testConfig(t))
	p := createProduct(t, ts.URL, 5)
	ctx := context.Background()
	if _, err := app.store.Deduct(ctx, Deduction{ProductID: p.ID, Count: 1, Fence: 200, RequestID: "newer"}); err != nil {
		t.Fatal(err)
	}
	_, err := app.store.Deduct(ctx, Deduction{ProductID: p.ID, Count: 1, Fence: 100, RequestID: "stale"})
	if !errorsIs(err, ErrStaleFence) {
		t.Fatalf("stale write: %v, want ErrStaleFence", err)
	}
	orders, _, _ := app.store.OrderStats(ctx, p.ID)
	if orders != 1 {
		t.Errorf("%d orders, want 1 (the stale write must leave nothing)", orders)
	}
}

func TestCreateOrderBadRequests(t *testing.T) {
	_, ts, _ := newTestApp(t, testConfig(t))
	p := createProduct(t, ts.URL, 5)
	for _, tc := range []struct{ body, code string }{
		{fmt.Sprintf(`{"productId":%d,"count":1}`, p.ID), CodeMissingRequestNo},
		{fmt.Sprintf(`{"requestNo":"   ","productId":%d,"count":1}`, p.ID), CodeMissingRequestNo},
		{fmt.Sprintf(`{"requestNo":"","productId":%d,"count":1}`, p.ID), CodeMissingRequestNo},
		{fmt.Sprintf(`{"requestNo":"R","productId":%d,"count":0}`, p.ID), CodeInvalidCount},
		{fmt.Sprintf(`{"requestNo":"R","productId":%d,"count":-1}`, p.ID), CodeInvalidCount},
		{`{"requestNo":"R","count":1}`, CodeInvalidProductID},
		{`{"requestNo":"R","productId":1,"count":"many"}`, CodeInvalidJSON},
		{`not json`, CodeInvalidJSON},
		{``, CodeInvalidJSON},
	} {
		r := call(t, "POST", ts.URL+"/api/orders", tc.body)
		if r.status != http.StatusBadRequest || r.apiErr(t).Code != tc.code {
			t.Errorf("body %s: %d %s, want 400 %s", tc.body, r.status, r.body, tc.code)
		}
	}

	// A requestNo over the limit has a code of its own, and the message
	// names the limit; one at the limit is fine.
	long := fmt.Sprintf(`{"requestNo":%q,"productId":%d,"count":1}`, strings.Repeat("n", maxRequestNoLen+1), p.ID)
	r := call(t, "POST", ts.URL+"/api/orders", long)
	if r.status != http.StatusBadRequest {
		t.Fatalf("requestNo of %d bytes: %d %s, want 400", maxRequestNoLen+1, r.status, r.body)
	}
	if e := r.apiErr(t); e.Code != CodeInvalidRequestNo || !strings.Contains(e.Message, "129 bytes") || !strings.Contains(e.Message, "at most 128") {
		t.Errorf("requestNo of %d bytes: %+v, want %s naming its length and the limit 128", maxRequestNoLen+1, e, CodeInvalidRequestNo)
	}
	atLimit := fmt.Sprintf(`{"requestNo":%q,"productId":%d,"count":1}`, strings.Repeat("n", maxRequestNoLen), p.ID)
	if r := call(t, "POST", ts.URL+"/api/orders", atLimit); r.status != http.StatusCreated {
		t.Errorf("requestNo of %d bytes: %d %s, want 201", maxRequestNoLen, r.status, r.body)
	}
}

// A requestNo reused with another product or count is refused (422), not
// answered with the first order's response; the same body still replays.
func TestCreateOrderRequestMismatch(t *testing.T) {
	cfg := testConfig(t)
	cfg.WorkDelay = 300 * time.Millisecond // how long a first request stays in progress
	cfg.LockWait = 2 * time.Second
	app, ts, logs := newTestApp(t, cfg)
	ctx := context.Background()
	p1 := createProduct(t, ts.URL, 10)
	p2 := createProduct(t, ts.URL, 10)
	order := func(no string, product int64, count int) string {
		return fmt.Sprintf(`{"requestNo":%q,"productId":%d,"count":%d}`, no, product, count)
	}
	// mismatch posts body and wants 422 request_mismatch, naming the request
	// number and the first order.
	mismatch := func(body string, firstProduct int64, firstCount int) {
		t.Helper()
		r := call(t, "POST", ts.URL+"/api/orders", body)
		if r.status != http.StatusUnprocessableEntity || r.header.Get(HeaderReplayed) != "" {
			t.Errorf("body %s: %d %s (replayed %q), want 422", body, r.status, r.body, r.header.Get(HeaderReplayed))
			return
		}
		e := r.apiErr(t)
		if e.Code != CodeRequestMismatch || !strings.Contains(e.Message, "already used for a different order") ||
			(firstProduct != 0 && !strings.Contains(e.Message, fmt.Sprintf("(productId %d, count %d)", firstProduct, firstCount))) {
			t.Errorf("body %s: %+v, want %s naming the first order", body, e, CodeRequestMismatch)
		}
	}
	// whileInProgress runs body's request, and calls during once its record
	// is in progress.
	whileInProgress := func(no, body string, during func()) reply {
		t.Helper()
		var first reply
		var wg sync.WaitGroup
		wg.Go(func() { first = call(t, "POST", ts.URL+"/api/orders", body) })
		waitUntil(t, "request "+no+" in progress", func() bool {
			rec, found, err := app.store.Idempotency().Get(ctx, orderScope, no)
			if err != nil {
				t.Fatal(err)
			}
			return found && rec.State == "in_progress"
		})
		during()
		wg.Wait()
		if first.status != http.StatusCreated {
			t.Fatalf("first %s: %d %s", no, first.status, first.body)
		}
		return first
	}

	// A finished request: its stored record is read before any lock.
	first := call(t, "POST", ts.URL+"/api/orders", order("MIX-1", p1.ID, 2))
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	mismatch(order("MIX-1", p1.ID, 1), p1.ID, 2) // another count
	mismatch(order("MIX-1", p2.ID, 2), p1.ID, 2) // another product
	again := call(t, "POST", ts.URL+"/api/orders", order("MIX-1", p1.ID, 2))
	if again.status != http.StatusCreated || again.header.Get(HeaderReplayed) != "true" || !bytes.Equal(again.body, first.body) {
		t.Errorf("the same body again: %d %q %s, want the first body replayed", again.status, again.header.Get(HeaderReplayed), again.body)
	}

	// A duplicate naming another product while the first runs is refused
	// at once from the record's fingerprint (the first order is not made
	// yet, so the message cannot name it); it takes no lock.
	whileInProgress("MIX-2", order("MIX-2", p1.ID, 1), func() {
		mismatch(order("MIX-2", p2.ID, 1), 0, 0)
	})
	// The same while that other product is busy.
	held, err := lockClient(t, cfg).TryAcquire(ctx, fmt.Sprintf("product:%d", p2.ID), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	whileInProgress("MIX-3", order("MIX-3", p1.ID, 3), func() {
		mismatch(order("MIX-3", p2.ID, 3), 0, 0)
	})
	held.Release(ctx)
	// Those were the paths taken.
	for _, want := range []struct{ no, lockOutcome string }{
		{"MIX-1", "not needed (stored response)"}, {"MIX-2", "not needed (stored response)"}, {"MIX-3", "not needed (stored response)"},
	} {
		if !hasLogLine(logs.String(), map[string]any{"msg": "create_order", "request_no": want.no,
			"product_id": float64(p2.ID), "outcome": "request_mismatch", "lock_outcome": want.lockOutcome}) {
			t.Errorf("no create_order log line of %s for product %d with lock_outcome %q and outcome request_mismatch", want.no, p2.ID, want.lockOutcome)
		}
	}

	// One order each, and the refused requests took nothing.
	counts, err := app.store.OrdersByRequestNo(ctx, "MIX-")
	if err != nil || len(counts) != 3 || counts["MIX-1"] != 1 || counts["MIX-2"] != 1 || counts["MIX-3"] != 1 {
		t.Errorf("orders by request number %v (%v), want one each for MIX-1, MIX-2 and MIX-3", counts, err)
	}
	for _, want := range []struct{ id, stock int64 }{{p1.ID, 10 - 2 - 1 - 3}, {p2.ID, 10}} {
		if got, _ := app.store.Product(ctx, want.id); got.Stock != want.stock {
			t.Errorf("product %d: stock %d, want %d", want.id, got.Stock, want.stock)
		}
	}

	// A record stored before the request hash was kept (the bare body) is
	// still replayed.
	old := []byte(`{"id":99,"productId":1,"count":1}` + "\n")
	if _, err := app.store.db.ExecContext(ctx, `INSERT INTO `+idempotencyTable+
		` (scope, request_key, state, fence, response, updated_ms) VALUES (?, ?, 'done', 1, ?, 0)`, orderScope, "OLD-1", old); err != nil {
		t.Fatal(err)
	}
	r := call(t, "POST", ts.URL+"/api/orders", order("OLD-1", p1.ID, 1))
	if r.status != http.StatusCreated || r.header.Get(HeaderReplayed) != "true" || !bytes.Equal(r.body, old) {
		t.Errorf("old record: %d %q %s, want %s replayed", r.status, r.header.Get(HeaderReplayed), r.body, old)
	}
}

// hasLogLine reports whether a JSON log line of logs has all the fields of
// want.
func hasLogLine(logs string, want map[string]any) bool {
	for line := range strings.Lines(logs) {
		var got map[string]any
		if json.Unmarshal([]byte(line), &got) != nil {
			continue
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func TestCreateOrderReplaysTheFirstResponse(t *testing.T) {
	app, ts, _ := newTestApp(t, testConfig(t))
	p := createProduct(t, ts.URL, 5)
	body := fmt.Sprintf(`{"requestNo":"ORDER-1","productId":%d,"count":2}`, p.ID)

	first := call(t, "POST", ts.URL+"/api/orders", body)
	if first.status != http.StatusCreated || first.header.Get(HeaderReplayed) != "" {
		t.Fatalf("first: %d %s (replayed %q), want 201 not replayed", first.status, first.body, first.header.Get(HeaderReplayed))
	}
	var o Order
	if err := json.Unmarshal(first.body, &o); err != nil || o.RequestNo != "ORDER-1" || o.Count != 2 || o.Fence <= 0 {
		t.Fatalf("first order %+v (%v)", o, err)
	}
	for range 3 {
		again := call(t, "POST", ts.URL+"/api/orders", body)
		if again.status != http.StatusCreated || again.header.Get(HeaderReplayed) != "true" {
			t.Fatalf("duplicate: %d %s (replayed %q), want 201 replayed", again.status, again.body, again.header.Get(HeaderReplayed))
		}
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replayed body\n%s\ndiffers from the first\n%s", again.body, first.body)
		}
	}
	counts, err := app.store.OrdersByRequestNo(context.Background(), "ORDER-")
	if err != nil || counts["ORDER-1"] != 1 || len(counts) != 1 {
		t.Errorf("orders by request number %v (%v), want one for ORDER-1", counts, err)
	}
	if got, _ := app.store.Product(context.Background(), p.ID); got.Stock != 3 {
		t.Errorf("stock %d, want 3", got.Stock)
	}
}

func TestCreateOrderInProgress(t *testing.T) {
	cfg := testConfig(t)
	cfg.WorkDelay = 700 * time.Millisecond // the first request stays in progress that long
	cfg.LockWait = 100 * time.Millisecond
	app, ts, _ := newTestApp(t, cfg)
	p := createProduct(t, ts.URL, 5)
	body := fmt.Sprintf(`{"requestNo":"SLOW-1","productId":%d,"count":1}`, p.ID)

	var first reply
	var wg sync.WaitGroup
	wg.Go(func() { first = call(t, "POST", ts.URL+"/api/orders", body) })
	// Wait until the first request has claimed its record.
	waitUntil(t, "the first request in progress", func() bool {
		rec, found, err := app.store.Idempotency().Get(context.Background(), orderScope, "SLOW-1")
		if err != nil {
			t.Fatal(err)
		}
		return found && rec.State == "in_progress"
	})
	dup := call(t, "POST", ts.URL+"/api/orders", body)
	if dup.status != http.StatusConflict || dup.apiErr(t).Code != CodeInProgress {
		t.Errorf("duplicate while in progress: %d %s, want 409 %s", dup.status, dup.body, CodeInProgress)
	}
	wg.Wait()
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	later := call(t, "POST", ts.URL+"/api/orders", body)
	if later.status != http.StatusCreated || later.header.Get(HeaderReplayed) != "true" || !bytes.Equal(later.body, first.body) {
		t.Errorf("duplicate after: %d %q %s, want the first body replayed", later.status, later.header.Get(HeaderReplayed), later.body)
	}
}

func TestRequestIDAndJSONErrors(t *testing.T) {
	_, ts, _ := newTestApp(t, testConfig(t))

	r := call(t, "GET", ts.URL+"/healthz", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"status":"ok"`) {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	if id := r.header.Get(HeaderRequestID); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Errorf("generated request id %q, want 32 hex digits", id)
	}
	r = call(t, "GET", ts.URL+"/healthz", "", HeaderRequestID, "abc-123")
	if id := r.header.Get(HeaderRequestID); id != "abc-123" {
		t.Errorf("request id %q, want the client's abc-123", id)
	}
	r = call(t, "GET", ts.URL+"/healthz", "", HeaderRequestID, strings.Repeat("x", 200))
	if id := r.header.Get(HeaderRequestID); len(id) != 32 {
		t.Errorf("request id %q for a 200-byte one, want a generated one", id)
	}

	r = call(t, "GET", ts.URL+"/nowhere", "")
	if r.status != http.StatusNotFound || r.apiErr(t).Code != CodeNotFound {
		t.Errorf("unknown route: %d %s", r.status, r.body)
	}
	r = call(t, "DELETE", ts.URL+"/api/products/1", "")
	if r.status != http.StatusMethodNotAllowed || r.apiErr(t).Code != CodeMethodNotAllowed || r.header.Get("Allow") == "" {
		t.Errorf("wrong method: %d %s (Allow %q)", r.status, r.body, r.header.Get("Allow"))
	}
	r = call(t, "POST", ts.URL+"/api/products", `{"name":"x","stock":-1}`)
	if r.status != http.StatusBadRequest || r.apiErr(t).Code != CodeInvalidProduct {
		t.Errorf("negative stock: %d %s", r.status, r.body)
	}
	m := call(t, "GET", ts.URL+"/metrics", "")
	if !strings.Contains(string(m.body), `orderservice_http_requests_total{route="unmatched",code="404"} 1`) {
		t.Errorf("/metrics does not count the unmatched route:\n%s", m.body)
	}
}

// Graceful shutdown: a request in flight when the signal comes finishes,
// and the service exits with its lock released.
func TestGracefulShutdown(t *testing.T) {
	cfg := testConfig(t)
	cfg.WorkDelay = 500 * time.Millisecond
	log, logs := testLogger(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, log, func(addr string) { addrc <- addr }) }()
	var base string
	select {
	case addr := <-addrc:
		base = "http://" + addr
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	p := createProduct(t, base, 3)

	var r reply
	var wg sync.WaitGroup
	wg.Go(func() { r = call(t, "POST", fmt.Sprintf("%s/api/stock/%d/deduct?count=1", base, p.ID), "") })
	// Wait until the request is inside its critical section: its product
	// lock is in Redis (it holds it for the work delay, 500 ms).
	opts, _ := redis.ParseURL(cfg.RedisURL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	lockKey := fmt.Sprintf("%s:{product:%d}:lock", cfg.Namespace, p.ID)
	waitUntil(t, "the request's lock "+lockKey, func() bool {
		n, err := rdb.Exists(context.Background(), lockKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	cancel() // SIGTERM
	wg.Wait()
	if r.status != http.StatusOK {
		t.Errorf("in-flight request: %d %s, want 200", r.status, r.body)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after shutdown")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped`) {
		t.Error("no stopped log line")
	}
	n, err := rdb.Exists(context.Background(), lockKey).Result()
	if err != nil || n != 0 {
		t.Errorf("lock key exists %d (%v) after shutdown, want released", n, err)
	}
}

// waitUntil polls cond until it holds, failing the test after 10s (which
// only bounds a hang: the machine may be loaded).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	const limit = 10 * time.Second
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		<-tick.C
	}
}
