package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes (the app logs
// from many goroutines).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testConfig returns a configuration on a private redis-server and a fresh
// SQLite file.
func testConfig(t *testing.T) Config {
	t.Helper()
	cfg, _ := testConfigRedis(t)
	return cfg
}

// testConfigRedis is testConfig that also returns the redis-server, for
// tests that stop or restart it.
func testConfigRedis(t *testing.T) (Config, *redisserver.Server) {
	t.Helper()
	srv := servertest.Redis(t)
	cfg := defaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.RedisURL = "redis://" + srv.Addr() + "/0"
	cfg.SQLitePath = filepath.Join(t.TempDir(), "orders.db")
	cfg.Namespace = "test"
	cfg.LogLevel = slog.LevelDebug
	return cfg, srv
}

// testLogger logs to a buffer that is shown if the test fails.
func testLogger(t *testing.T) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// newTestApp starts the API on cfg behind an httptest server.
func newTestApp(t *testing.T, cfg Config) (*App, *httptest.Server, *syncBuffer) {
	t.Helper()
	log, buf := testLogger(t)
	app, err := NewApp(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(app.Handler())
	t.Cleanup(func() {
		ts.Close()
		if err := app.Close(); err != nil {
			t.Errorf("closing the app: %v", err)
		}
	})
	return app, ts, buf
}

// reply is a response read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// apiErr decodes an error body.
func (r reply) apiErr(t *testing.T) APIError {
	t.Helper()
	var e APIError
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	return e
}

// call sends a request and reads the reply. A body goes as
// application/json unless header sets another Content-Type (or "" for none).
func call(t *testing.T, method, url, body string, header ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // unless header says otherwise
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get(HeaderRequestID) == "" {
		t.Errorf("%s %s: no %s header", method, url, HeaderRequestID)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// createProduct creates a product through the API.
func createProduct(t *testing.T, base string, stock int64) Product {
	t.Helper()
	r := call(t, "POST", base+"/api/products", `{"name":"widget","stock":`+strconv.FormatInt(stock, 10)+`}`)
	if r.status != http.StatusCreated {
		t.Fatalf("creating a product: %d %s", r.status, r.body)
	}
	var p Product
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
