package fencelockprom_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelockprom"
	"github.com/fencelock/fencelock/memorybackend"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// scrape fetches srv's metrics page and returns its lines that start with
// one of the prefixes (all lines with none).
func scrape(t *testing.T, srv *httptest.Server) []string {
	t.Helper()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s: %s", resp.Status, body)
	}
	return strings.Split(string(body), "\n")
}

// value returns the value of the series line (name and labels, exactly as
// the text format writes them) in lines, or "" when there is none.
func value(lines []string, series string) string {
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// expect checks the values of series in a fresh scrape.
func expect(t *testing.T, srv *httptest.Server, step string, want map[string]string) {
	t.Helper()
	lines := scrape(t, srv)
	for series, v := range want {
		if got := value(lines, series); got != v {
			t.Errorf("%s: %s = %q, want %q", step, series, got, v)
		}
	}
}

// eventually scrapes until series has value v, for up to 10 seconds.
func eventually(t *testing.T, srv *httptest.Server, series, v string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := value(scrape(t, srv), series)
		if got == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q after 10s, want %q", series, got, v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMetricsRedis feeds Metrics from two Clients on a real redis-server
// and scrapes them over HTTP as Prometheus would: a held lock, a waiter, a
// hand-off, a refusal, an invalid call, renewals, a lock taken away (lost,
// "gone"), Close. It also lints the metrics against Prometheus's naming
// conventions.
func TestMetricsRedis(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewPedanticRegistry()
	m := fencelockprom.New()
	reg.MustRegister(m)
	web := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(web.Close)

	c1 := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(m.Hooks()))
	c2 := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(m.Hooks()))
	t.Cleanup(func() { c1.Close(); c2.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	expect(t, web, "at start", map[string]string{
		`fencelock_held_locks{kind="lock"}`:     "0",
		`fencelock_waiters{kind="semaphore"}`:   "0",
		`fencelock_renewals_total`:              "0",
		`fencelock_renewal_failures_total`:      "0",
		`fencelock_renewal_batch_seconds_count`: "0",
	})

	a, err := c1.TryAcquire(ctx, "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.TryAcquire(ctx, "a", 10*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	if _, err := c1.TryAcquire(ctx, "", 10*time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("TryAcquire with an empty key: %v", err)
	}
	waited := make(chan *fencelock.Lock)
	go func() {
		lk, err := c2.Acquire(ctx, "a", 10*time.Second, fencelock.WithWait(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		waited <- lk
	}()
	eventually(t, web, `fencelock_waiters{kind="lock"}`, "1")
	expect(t, web, "while c2 waits", map[string]string{
		`fencelock_held_locks{kind="lock"}`:                                        "1",
		`fencelock_acquire_wait_seconds_count{kind="lock",outcome="acquired"}`:     "1",
		`fencelock_acquire_wait_seconds_count{kind="lock",outcome="not_acquired"}`: "1",
		`fencelock_acquire_wait_seconds_count{kind="lock",outcome="invalid"}`:      "1",
	})
	time.Sleep(20 * time.Millisecond) // held at least that long
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-waited
	expect(t, web, "after the hand-off", map[string]string{
		`fencelock_waiters{kind="lock"}`:                                       "0",
		`fencelock_held_locks{kind="lock"}`:                                    "1",
		`fencelock_acquire_wait_seconds_count{kind="lock",outcome="acquired"}`: "2",
		`fencelock_hold_seconds_count{kind="lock"}`:                            "1",
	})
	// The waiter waited for the release, and the first holder held the
	// lock, at least 20ms each.
	lines := scrape(t, web)
	for _, series := range []string{`fencelock_acquire_wait_seconds_sum{kind="lock",outcome="acquired"}`, `fencelock_hold_seconds_sum{kind="lock"}`} {
		if v, err := strconv.ParseFloat(value(lines, series), 64); err != nil || v < 0.02 {
			t.Errorf("%s = %q, want at least 0.02", series, value(lines, series))
		}
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Renewals, then the lock is taken away: the next renewal finds it gone.
	// (Every 100ms: each renewal may take half of that, which a busy CI
	// machine does not exceed; at 20ms, 10ms was sometimes too short, and
	// the renewal counted as failed.)
	r, err := c1.Acquire(ctx, "r", 10*time.Second, fencelock.WithAutoRenew(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if v := value(scrape(t, web), "fencelock_renewals_total"); v != "0" && v != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no renewal within 10s of renewals every 100ms")
		}
	}
	if _, err := c2.ForceRelease(ctx, "r", "TestMetricsRedis"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock taken away was not lost within 10s")
	}
	// The Lost hook runs just after Done is closed, on the keeper's
	// goroutine: wait for it.
	eventually(t, web, `fencelock_locks_lost_total{kind="lock",reason="gone"}`, "1")
	eventually(t, web, `fencelock_held_locks{kind="lock"}`, "0")
	lines = scrape(t, web)
	if v := value(lines, "fencelock_renewals_total"); v == "0" || v == "" {
		t.Errorf("fencelock_renewals_total = %q after renewals", v)
	}
	if v := value(lines, "fencelock_renewal_batch_seconds_count"); v == "0" || v == "" {
		t.Errorf("fencelock_renewal_batch_seconds_count = %q after renewals", v)
	}

	// A permit and a read hold, released by Close.
	if _, err := c1.Semaphore("s", 2).TryAcquire(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.RWLock("rw").TryAcquireRead(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, web, "a permit and a read hold", map[string]string{
		`fencelock_held_locks{kind="semaphore"}`: "1",
		`fencelock_held_locks{kind="read"}`:      "1",
	})
	// A renewal of "r" above may have failed for real: every 100ms, each
	// has 50ms to get its answer, which a loaded machine sometimes does not
	// give (seen under stress-ng). Close itself adds no failure.
	failures := value(scrape(t, web), "fencelock_renewal_failures_total")
	c1.Close()
	c2.Close()
	expect(t, web, "after Close", map[string]string{
		`fencelock_held_locks{kind="lock"}`:              "0",
		`fencelock_held_locks{kind="semaphore"}`:         "0",
		`fencelock_held_locks{kind="read"}`:              "0",
		`fencelock_hold_seconds_count{kind="semaphore"}`: "1",
		`fencelock_hold_seconds_count{kind="read"}`:      "1",
		`fencelock_renewal_failures_total`:               failures,
	})

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestMetricsKeyLabel runs Clients on the memory backend under synctest,
// where durations are exact, with WithKeyLabel mapping keys to their
// prefix, and compares the whole exposition of the gauges and counters and
// the bucket counts of the histograms.
func TestMetricsKeyLabel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		reg := prometheus.NewPedanticRegistry()
		m := fencelockprom.New(
			fencelockprom.WithKeyLabel(func(key string) string { prefix, _, _ := strings.Cut(key, ":"); return prefix }),
			fencelockprom.WithConstLabels(prometheus.Labels{"service": "orders"}),
			fencelockprom.WithBuckets([]float64{0.1, 1}, []float64{0.5, 2}))
		reg.MustRegister(m)
		holder := fencelock.New(shared{b})
		c := fencelock.New(shared{b}, fencelock.WithHooks(m.Hooks()))
		t.Cleanup(func() { c.Close(); holder.Close() })
		ctx := context.Background()

		o1, err := c.TryAcquire(ctx, "order:1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, "order:2", time.Minute); err != nil {
			t.Fatal(err)
		}
		busy, err := holder.TryAcquire(ctx, "stock:9", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() {
			_, err := c.Acquire(ctx, "stock:9", time.Minute)
			done <- err
		}()
		synctest.Wait()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fencelock_held_locks Locks held now.
# TYPE fencelock_held_locks gauge
fencelock_held_locks{key="order",kind="lock",service="orders"} 2
# HELP fencelock_waiters Acquire calls waiting now for a lock someone else holds, or for the backend.
# TYPE fencelock_waiters gauge
fencelock_waiters{key="stock",kind="lock",service="orders"} 1
`), "fencelock_held_locks", "fencelock_waiters"); err != nil {
			t.Error(err)
		}

		time.Sleep(1500 * time.Millisecond)
		if err := busy.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := o1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fencelock_acquire_wait_seconds Time an acquire call took, attempts and waiting included, by how it ended.
# TYPE fencelock_acquire_wait_seconds histogram
fencelock_acquire_wait_seconds_bucket{key="order",kind="lock",outcome="acquired",service="orders",le="0.1"} 2
fencelock_acquire_wait_seconds_bucket{key="order",kind="lock",outcome="acquired",service="orders",le="1"} 2
fencelock_acquire_wait_seconds_bucket{key="order",kind="lock",outcome="acquired",service="orders",le="+Inf"} 2
fencelock_acquire_wait_seconds_sum{key="order",kind="lock",outcome="acquired",service="orders"} 0
fencelock_acquire_wait_seconds_count{key="order",kind="lock",outcome="acquired",service="orders"} 2
fencelock_acquire_wait_seconds_bucket{key="stock",kind="lock",outcome="acquired",service="orders",le="0.1"} 0
fencelock_acquire_wait_seconds_bucket{key="stock",kind="lock",outcome="acquired",service="orders",le="1"} 0
fencelock_acquire_wait_seconds_bucket{key="stock",kind="lock",outcome="acquired",service="orders",le="+Inf"} 1
fencelock_acquire_wait_seconds_sum{key="stock",kind="lock",outcome="acquired",service="orders"} 1.5
fencelock_acquire_wait_seconds_count{key="stock",kind="lock",outcome="acquired",service="orders"} 1
# HELP fencelock_hold_seconds Time a released lock was held, from the sending of its acquiring request to its release.
# TYPE fencelock_hold_seconds histogram
fencelock_hold_seconds_bucket{key="order",kind="lock",service="orders",le="0.5"} 0
fencelock_hold_seconds_bucket{key="order",kind="lock",service="orders",le="2"} 1
fencelock_hold_seconds_bucket{key="order",kind="lock",service="orders",le="+Inf"} 1
fencelock_hold_seconds_sum{key="order",kind="lock",service="orders"} 1.5
fencelock_hold_seconds_count{key="order",kind="lock",service="orders"} 1
# HELP fencelock_held_locks Locks held now.
# TYPE fencelock_held_locks gauge
fencelock_held_locks{key="order",kind="lock",service="orders"} 1
fencelock_held_locks{key="stock",kind="lock",service="orders"} 1
`), "fencelock_acquire_wait_seconds", "fencelock_hold_seconds", "fencelock_held_locks", "fencelock_waiters"); err != nil {
			t.Error(err) // no waiters series: with a key label, a series at 0 goes away
		}

		// A loss by deadline (no renewal), with its key.
		if _, err := c.TryAcquire(ctx, "job:nightly", time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fencelock_locks_lost_total Locks lost: the hold was gone, the lease deadline passed without renewal, WithMaxHold ended it, or a renewal was refused for the client's configuration.
# TYPE fencelock_locks_lost_total counter
fencelock_locks_lost_total{key="job",kind="lock",reason="deadline",service="orders"} 1
`), "fencelock_locks_lost_total"); err != nil {
			t.Error(err)
		}
	})
}

// shared hides the memory backend's Close from the Clients sharing it.
type shared struct{ *memorybackend.Backend }

func (shared) Close() error { return nil }
