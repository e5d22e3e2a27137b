package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/faultproxy"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/jackc/pgx/v5"
)

// testDatabases returns the test configuration on SQLite and on a fresh
// PostgreSQL database.
func testDatabases(t *testing.T) map[string]Config {
	sqlite := testConfig(t)
	pg := testConfig(t)
	pg.DatabaseURL = servertest.Postgres(t)
	return map[string]Config{"sqlite": sqlite, "postgres": pg}
}

// Text PostgreSQL cannot store (a NUL byte) and other control characters
// in a requestNo or a product name are refused at the edge with a 400
// naming the field, on both databases; a blank name is refused instead of
// becoming "product". Unchecked, a NUL byte would give 500 on PostgreSQL
// (`invalid byte sequence for encoding "UTF8": 0x00`) and be stored by
// SQLite.
func TestUnstorableTextRefused(t *testing.T) {
	for name, cfg := range testDatabases(t) {
		t.Run(name, func(t *testing.T) {
			app, ts, _ := newTestApp(t, cfg)
			p := createProduct(t, ts.URL, 5)
			for _, tc := range []struct {
				path, body, code, mention string
			}{
				{"/api/orders", fmt.Sprintf(`{"requestNo":"R-\u0000-1","productId":%d,"count":1}`, p.ID), CodeInvalidRequestNo, "invalid requestNo: contains a NUL character (U+0000) at byte 2"},
				{"/api/orders", fmt.Sprintf(`{"requestNo":"R-\n","productId":%d,"count":1}`, p.ID), CodeInvalidRequestNo, "invalid requestNo: contains a control character (U+000A)"},
				{"/api/products", `{"name":"wid\u0000get","stock":1}`, CodeInvalidProduct, "invalid name: contains a NUL character"},
				{"/api/products", `{"name":"a\u007fb","stock":1}`, CodeInvalidProduct, "invalid name: contains a control character (U+007F)"},
				{"/api/products", `{"name":"   ","stock":1}`, CodeInvalidProduct, "invalid name: must not be blank"},
				{"/api/products", `{"stock":1}`, CodeInvalidProduct, "invalid name: must not be blank"},
				{"/api/products", fmt.Sprintf(`{"name":%q,"stock":1}`, strings.Repeat("n", maxNameLen+1)), CodeInvalidProduct, "201 bytes long, at most 200"},
			} {
				r := call(t, "POST", ts.URL+tc.path, tc.body)
				if r.status != http.StatusBadRequest {
					t.Errorf("POST %s %q: %d %s, want 400", tc.path, tc.body, r.status, r.body)
					continue
				}
				if e := r.apiErr(t); e.Code != tc.code || !strings.Contains(e.Message, tc.mention) {
					t.Errorf("POST %s %q: %+v, want %s mentioning %q", tc.path, tc.body, e, tc.code, tc.mention)
				}
			}
			// Nothing was written, and text outside ASCII is fine.
			if got, _ := app.store.Product(context.Background(), p.ID); got.Stock != 5 {
				t.Errorf("stock %d, want 5", got.Stock)
			}
			if r := call(t, "POST", ts.URL+"/api/products", `{"name":"café ☕","stock":1}`); r.status != http.StatusCreated {
				t.Errorf("a name with accents: %d %s", r.status, r.body)
			}
			if r := call(t, "POST", ts.URL+"/api/orders", fmt.Sprintf(`{"requestNo":"注文-1","productId":%d,"count":1}`, p.ID)); r.status != http.StatusCreated {
				t.Errorf("a requestNo outside ASCII: %d %s", r.status, r.body)
			}
		})
	}
}

// Bodies must be sent as application/json (415 otherwise), at most 64 KiB
// (413), and 400 messages name JSON fields and JSON kinds, never Go types.
func TestRequestBodyRules(t *testing.T) {
	_, ts, _ := newTestApp(t, testConfig(t))
	p := createProduct(t, ts.URL, 5)
	order := fmt.Sprintf(`{"requestNo":"CT-1","productId":%d,"count":1}`, p.ID)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/jsonx", "no/such;;"} {
		r := call(t, "POST", ts.URL+"/api/orders", order, "Content-Type", ct)
		if r.status != http.StatusUnsupportedMediaType || r.apiErr(t).Code != CodeUnsupportedMedia || !strings.Contains(r.apiErr(t).Message, ct) {
			t.Errorf("Content-Type %q: %d %s, want 415 %s naming it", ct, r.status, r.body, CodeUnsupportedMedia)
		}
	}
	if r := call(t, "POST", ts.URL+"/api/orders", order, "Content-Type", ""); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("no Content-Type: %d %s, want 415", r.status, r.body)
	}
	if r := call(t, "POST", ts.URL+"/api/orders", order, "Content-Type", "application/json; charset=utf-8"); r.status != http.StatusCreated {
		t.Errorf("application/json with a charset: %d %s, want 201", r.status, r.body)
	}

	big := `{"name":"` + strings.Repeat("x", maxBodyLen) + `","stock":1}`
	if r := call(t, "POST", ts.URL+"/api/products", big); r.status != http.StatusRequestEntityTooLarge || r.apiErr(t).Code != CodeBodyTooLarge {
		t.Errorf("a body over %d bytes: %d %s, want 413 %s", maxBodyLen, r.status, r.body, CodeBodyTooLarge)
	}

	for _, tc := range []struct{ body, mention string }{
		{`{"requestNo":"R","productId":1,"count":"many"}`, "invalid count: got a string, want an integer"},
		{`{"requestNo":"R","productId":1,"count":1e30}`, "invalid count: got the number 1e30, want an integer"},
		{`{"requestNo":7,"productId":1,"count":1}`, "invalid requestNo: got a number, want a string"},
		{`[1,2]`, "got an array, want an object"},
		{`"text"`, "got a string, want an object"},
		{`{"requestNo":`, "invalid JSON body"},
		{`{"requestNo" "R"}`, "invalid JSON body at byte"},
	} {
		r := call(t, "POST", ts.URL+"/api/orders", tc.body)
		e := r.apiErr(t)
		if r.status != http.StatusBadRequest || e.Code != CodeInvalidJSON || !strings.Contains(e.Message, tc.mention) {
			t.Errorf("body %s: %d %+v, want 400 %s mentioning %q", tc.body, r.status, e, CodeInvalidJSON, tc.mention)
		}
		for _, goWord := range []string{"Go ", "int64", "CreateOrderRequest", "main.", "json:"} {
			if strings.Contains(e.Message, goWord) {
				t.Errorf("body %s: message %q shows %q", tc.body, e.Message, goWord)
			}
		}
	}
}

// A query parameter given twice is refused (which value was meant?), and
// so is a malformed query string; the first value is not taken.
func TestRepeatedQueryRefused(t *testing.T) {
	app, ts, _ := newTestApp(t, testConfig(t))
	p := createProduct(t, ts.URL, 5)
	for _, q := range []string{"count=1&count=2", "count=2&count=2", "count=1&x=1&x=2", "count=1;x=2", "count=%zz"} {
		r := call(t, "POST", fmt.Sprintf("%s/api/stock/%d/deduct?%s", ts.URL, p.ID, q), "")
		if r.status != http.StatusBadRequest || r.apiErr(t).Code != CodeInvalidQuery {
			t.Errorf("?%s: %d %s, want 400 %s", q, r.status, r.body, CodeInvalidQuery)
		}
	}
	if r := call(t, "POST", fmt.Sprintf("%s/api/stock/%d/deduct?count=2", ts.URL, p.ID), ""); r.status != http.StatusOK {
		t.Errorf("?count=2: %d %s", r.status, r.body)
	}
	if got, _ := app.store.Product(context.Background(), p.ID); got.Stock != 3 {
		t.Errorf("stock %d, want 3 (only the last request sold)", got.Stock)
	}
}

// GET /api/orders/{requestNo} answers the order with the body POST
// answered, 404 for an unknown number, 400 for one that cannot be.
func TestGetOrderByRequestNo(t *testing.T) {
	for name, cfg := range testDatabases(t) {
		t.Run(name, func(t *testing.T) {
			_, ts, _ := newTestApp(t, cfg)
			p := createProduct(t, ts.URL, 5)
			created := call(t, "POST", ts.URL+"/api/orders", fmt.Sprintf(`{"requestNo":"A/1 ✓","productId":%d,"count":2}`, p.ID))
			if created.status != http.StatusCreated {
				t.Fatalf("creating: %d %s", created.status, created.body)
			}
			got := call(t, "GET", ts.URL+"/api/orders/"+url.PathEscape("A/1 ✓"), "")
			if got.status != http.StatusOK || !bytes.Equal(got.body, created.body) {
				t.Errorf("GET: %d %s, want 200 %s", got.status, got.body, created.body)
			}
			var o Order
			if json.Unmarshal(got.body, &o) != nil || o.RequestNo != "A/1 ✓" || o.Count != 2 || o.Fence == 0 {
				t.Errorf("order %+v", o)
			}
			if r := call(t, "GET", ts.URL+"/api/orders/NOPE", ""); r.status != http.StatusNotFound || r.apiErr(t).Code != CodeOrderNotFound {
				t.Errorf("unknown requestNo: %d %s, want 404 %s", r.status, r.body, CodeOrderNotFound)
			}
			if r := call(t, "GET", ts.URL+"/api/orders/a%00b", ""); r.status != http.StatusBadRequest || r.apiErr(t).Code != CodeInvalidRequestNo {
				t.Errorf("a NUL in the requestNo: %d %s, want 400 %s", r.status, r.body, CodeInvalidRequestNo)
			}
		})
	}
}

// A 503 from /healthz says which dependency did not answer, but not the
// database's user, host or port (the driver's error goes to the log), as
// pgx's "failed to connect to `user=... database=...`: 127.0.0.1:PORT ..."
// would.
func TestHealthzHidesDatabaseDetails(t *testing.T) {
	pgURL := servertest.Postgres(t)
	pc, err := pgx.ParseConfig(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(t, net.JoinHostPort(pc.Host, fmt.Sprint(pc.Port)))
	u, err := url.Parse(pgURL)
	if err != nil || u.Host == "" {
		t.Fatalf("cannot put the proxy into %q: %v", pgURL, err)
	}
	u.Host = proxy.Addr()
	cfg := testConfig(t)
	cfg.DatabaseURL = u.String()
	_, ts, logs := newTestApp(t, cfg)
	if r := call(t, "GET", ts.URL+"/healthz", ""); r.status != http.StatusOK {
		t.Fatalf("healthz: %d %s", r.status, r.body)
	}
	proxy.Refuse(true)
	proxy.ResetAll()
	r := call(t, "GET", ts.URL+"/healthz", "")
	_, port, _ := net.SplitHostPort(proxy.Addr())
	if r.status != http.StatusServiceUnavailable || r.apiErr(t).Code != CodeUnavailable || !strings.Contains(r.apiErr(t).Message, "database") {
		t.Errorf("healthz with the database down: %d %s, want 503 %s naming the database", r.status, r.body, CodeUnavailable)
	}
	for _, secret := range []string{pc.User, port, "127.0.0.1", "user="} {
		if strings.Contains(string(r.body), secret) {
			t.Errorf("healthz body %s shows %q", r.body, secret)
		}
	}
	if !strings.Contains(logs.String(), "healthz: database") {
		t.Error("the database error was not logged")
	}
	proxy.Refuse(false)
}

// -redis-url takes host:port, as the fencelock CLI does (and REDIS_URL
// too); what is neither a URL nor host:port is refused at start-up with
// exit status 2. host:port must not fail with "invalid Redis URL".
func TestRedisHostPort(t *testing.T) {
	srv := servertest.Redis(t)
	cfg, err := parseConfig([]string{"-redis-url", srv.Addr()}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("-redis-url %s: %v", srv.Addr(), err)
	}
	cfg.SQLitePath = testConfig(t).SQLitePath
	cfg.Listen = "127.0.0.1:0"
	_, ts, _ := newTestApp(t, cfg)
	if r := call(t, "GET", ts.URL+"/healthz", ""); r.status != http.StatusOK {
		t.Errorf("healthz on Redis at host:port: %d %s", r.status, r.body)
	}
	for _, bad := range []string{"nohost", "a:1,b:2", "redis://%zz"} {
		if _, err := parseConfig([]string{"-redis-url", bad}, func(string) string { return "" }, io.Discard); err == nil ||
			!strings.Contains(err.Error(), "invalid Redis") {
			t.Errorf("-redis-url %q: %v, want an error", bad, err)
		}
	}
}

// Every command exits 2 when it could not run (bad flags, Redis
// unreachable at start-up), with its error on one line: serve does not
// exit 1 when Redis cannot be reached, like a failed load test.
func TestExitCodeCouldNotRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close() // nothing listens there now
	dir := t.TempDir()
	for _, args := range [][]string{
		{"serve", "-redis-url", deadAddr, "-sqlite", dir + "/a.db", "-listen", "127.0.0.1:0"},
		{"serve", "-lock-ttl", "1ms", "-work-delay", "-1s"},
		{"serve", "extra"},
		{"loadtest", "-instances", "1", "-requests", "0"},
	} {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %s)", args, code, errOut.String())
		}
		if lines := strings.Count(strings.TrimSpace(errOut.String()), "\n"); lines > 0 && args[0] == "loadtest" {
			t.Errorf("%v: error on %d lines: %s", args, lines+1, errOut.String())
		}
	}
	var errOut bytes.Buffer
	run([]string{"serve", "-lock-ttl", "1ms", "-work-delay", "-1s"}, io.Discard, &errOut)
	if got := strings.TrimSpace(errOut.String()); strings.Contains(got, "\n") || !strings.Contains(got, "; invalid -work-delay") {
		t.Errorf("two config errors: %q, want them on one line", got)
	}
}
