package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/dashboard"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// EnvScreenshot names the environment variable that, when set to a path,
// makes TestBrowser write a screenshot of the page with a few locks held
// there (docs/dashboard.png, shown in docs/operations.md):
//
//	FENCELOCK_DASHBOARD_SCREENSHOT=$PWD/docs/dashboard.png go test -run TestBrowser ./cmd/internal/dashboard
const EnvScreenshot = "FENCELOCK_DASHBOARD_SCREENSHOT"

// Bounds are generous: a busy 2-core machine starts Chromium in seconds.
const (
	testTimeout = 120 * time.Second
	seeWithin   = 30 * time.Second
)

// serve starts a dashboard of rdb on a free loopback port and returns its
// base URL; cleanup stops it and checks that Serve returned nil.
func serve(t *testing.T, rdb redis.UniversalClient, opts dashboard.Options) (*dashboard.Dashboard, string) {
	t.Helper()
	d, err := dashboard.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Serve did not return within 30s of its context's end")
		}
	})
	return d, "http://" + ln.Addr().String() + "/"
}

func redisClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func newClient(t *testing.T, rdb redis.UniversalClient, opts ...fencelock.Option) *fencelock.Client {
	c := fencelock.New(redisbackend.New(rdb), opts...)
	t.Cleanup(func() { c.Close() })
	return c
}

// rowJS is a JavaScript expression: the row of key in the page's table,
// as {fence, holder, ttl, holds, waiters} (texts), or null.
func rowJS(key string) string {
	k, _ := json.Marshal(key)
	return fmt.Sprintf(`(() => {
		const tr = [...document.querySelectorAll("#locks tbody tr")].find((r) => r.dataset.key === %s);
		if (!tr) return null;
		const text = (sel) => tr.querySelector(sel).textContent;
		return {fence: text("td.fence"), holder: text("td.holder"), ttl: text("td.ttl .left"), holds: text("td.holds"), waiters: text("td.waiters")};
	})()`, k)
}

type row struct{ Fence, Holder, TTL, Holds, Waiters string }

// The page shows a lock a Client takes, with its fence, holder identity
// and a lease that counts down; when it is released the row goes and a
// release event appears; the page reports no error of its own.
func TestBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	srv := servertest.Redis(t)
	rdb := redisClient(t, srv.Addr())
	_, url := serve(t, rdb, dashboard.Options{Interval: 250 * time.Millisecond})
	b := browser(t, ctx, 1280, 800)
	if err := b.Navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, seeWithin)
	defer wcancel()
	if err := b.WaitTrue(wctx, `document.getElementById("status").textContent === "live"`); err != nil {
		t.Fatal(err)
	}

	c := newClient(t, rdb, fencelock.WithIdentity("billing-7 pid 4242"))
	lk, err := c.TryAcquire(ctx, "orders:42", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var r row
	expr := rowJS("orders:42")
	if err := b.WaitTrue(wctx, expr+" !== null"); err != nil {
		t.Fatalf("the lock did not appear in the page: %v", err)
	}
	if err := b.Eval(ctx, expr, &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("row: %+v", r)
	if r.Fence != fmt.Sprint(lk.Fence()) || !strings.Contains(r.Holder, "billing-7 pid 4242") || r.Holds != "1" || r.Waiters != "0" {
		t.Errorf("row %+v; want fence %d, holder billing-7 pid 4242, 1 hold, 0 waiters", r, lk.Fence())
	}
	// The lease counts down in the page between snapshots: some tenths of
	// a second below a minute, never above.
	var secs float64
	if _, err := fmt.Sscanf(r.TTL, "%f s", &secs); err != nil || secs <= 0 || secs > 60 {
		t.Errorf("lease left %q: want a number of seconds in (0, 60]", r.TTL)
	}

	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitTrue(wctx, expr+" === null"); err != nil {
		t.Fatalf("the released lock stayed in the page: %v", err)
	}
	released := fmt.Sprintf(`[...document.querySelectorAll("#events li")].some((li) => li.dataset.kind === "released" && li.dataset.key === "orders:42" && li.dataset.fence === "%d")`, lk.Fence())
	if err := b.WaitTrue(wctx, released); err != nil {
		var events []string
		b.Eval(ctx, `[...document.querySelectorAll("#events li")].map((li) => li.textContent)`, &events)
		t.Fatalf("no release event: %v; events: %q", err, events)
	}
	var text string
	b.Eval(ctx, `document.querySelector("#events li").textContent`, &text)
	t.Logf("event: %s", text)
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}

	if path := os.Getenv(EnvScreenshot); path != "" {
		screenshot(t, ctx, rdb, url, path)
	}
}

// screenshot writes a PNG of the page with a few locks held, a waiter, a
// hand-off and an expiry.
func screenshot(t *testing.T, ctx context.Context, rdb redis.UniversalClient, url, path string) {
	b := browser(t, ctx, 1280, 720)
	if err := b.Navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	web := newClient(t, rdb, fencelock.WithIdentity("web-3:8812"))
	billing := newClient(t, rdb, fencelock.WithIdentity("billing-7:4242"))
	cron := newClient(t, rdb) // no identity: the page shows its owner token
	must := func(l *fencelock.Lock, err error) *fencelock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	must(web.TryAcquire(ctx, "orders:1017", 30*time.Second))
	inv := must(billing.TryAcquire(ctx, "invoice:2026-11", 20*time.Second))
	must(cron.TryAcquire(ctx, "jobs:nightly-report", 2*time.Minute))
	lost := must(web.TryAcquire(ctx, "cache:rebuild", 2*time.Second))
	lost.Release(ctx) // not renewed: the screenshot shows an expiry instead
	must(cron.TryAcquire(ctx, "cache:rebuild", 800*time.Millisecond))
	// The page has shown cron's hold, which the expiry below ends.
	js := `[...document.querySelectorAll("#events li")].some((li) => li.dataset.kind === "acquired" && li.dataset.key === "cache:rebuild")`
	if err := b.WaitTrue(ctx, js); err != nil {
		t.Fatalf("no acquired event of cache:rebuild in the page: %v", err)
	}
	// A hand-off: billing releases, web takes it at once.
	if err := inv.Release(ctx); err != nil {
		t.Fatal(err)
	}
	must(web.TryAcquire(ctx, "invoice:2026-11", 45*time.Second))
	// A waiter on orders:1017 (it shows in the waiters column).
	wctx, wcancel := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if l, err := billing.Acquire(wctx, "orders:1017", 30*time.Second); err == nil {
			l.Release(context.Background())
		}
	}()
	defer func() { wcancel(); <-waited }()
	// cache:rebuild's lease runs out.
	if err := b.WaitTrue(ctx, `document.querySelectorAll("#events li[data-kind=expired]").length > 0`); err != nil {
		t.Fatal(err)
	}
	png, err := b.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}

// state fetches /state.
func state(t *testing.T, ctx context.Context, url string) dashboard.Snapshot {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"state", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s dashboard.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitState polls /state until ok says yes.
func waitState(t *testing.T, ctx context.Context, url, what string, ok func(dashboard.Snapshot) bool) dashboard.Snapshot {
	t.Helper()
	var s dashboard.Snapshot
	if !poll(func() bool { s = state(t, ctx, url); return ok(s) }) {
		t.Fatalf("after %v, still not %s: %+v", seeWithin, what, s)
	}
	return s
}

// poll polls cond until it holds (true), for seeWithin at most (false).
func poll(cond func() bool) bool {
	deadline := time.Now().Add(seeWithin)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// With Redis down the page says so (and shows the last state seen); the
// dashboard keeps trying and shows the locks again when Redis is back.
func TestRedisDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	_, url := serve(t, rdb, dashboard.Options{Interval: 100 * time.Millisecond})
	c := newClient(t, rdb)
	if _, err := c.TryAcquire(ctx, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, url, "showing lock a", func(s dashboard.Snapshot) bool { return s.Error == "" && len(s.Locks) == 1 })

	b := browser(t, ctx, 1000, 600)
	if err := b.Navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	s := waitState(t, ctx, url, "Redis unreachable", func(s dashboard.Snapshot) bool { return s.Error != "" })
	if !strings.HasPrefix(s.Error, "Redis unreachable: ") || len(s.Locks) != 1 || s.LastOK.IsZero() {
		t.Errorf("with Redis down: error %q, %d locks, last ok %v; want Redis unreachable, the last lock seen, its time", s.Error, len(s.Locks), s.LastOK)
	}
	wctx, wcancel := context.WithTimeout(ctx, seeWithin)
	defer wcancel()
	if err := b.WaitTrue(wctx, `document.getElementById("status").textContent === "Redis unreachable" && !document.getElementById("banner").hidden`); err != nil {
		t.Fatal(err)
	}

	if err := srv.Restart(); err != nil { // empty: no persistence
		t.Fatal(err)
	}
	s = waitState(t, ctx, url, "Redis answering again", func(s dashboard.Snapshot) bool { return s.Error == "" })
	if len(s.Locks) != 0 || len(s.Events) == 0 || !strings.Contains(s.Events[0].Text, "Redis was unreachable") {
		t.Errorf("after the restart: %+v; want no lock, and an event that says a went while Redis was unreachable", s)
	}
	if err := b.WaitTrue(wctx, `document.getElementById("status").textContent === "live" && document.getElementById("banner").hidden`); err != nil {
		t.Fatal(err)
	}
	if errs := b.Errors(); len(errs) > 0 {
		// A refused EventSource reconnection is the browser's business;
		// only the page's own errors count. (The dashboard stayed up.)
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// Event streams end when their browsers go away (nothing left behind: the
// package's leak check), and Serve stops promptly with streams open.
func TestStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	srv := servertest.Redis(t)
	rdb := redisClient(t, srv.Addr())
	d, err := dashboard.New(rdb, dashboard.Options{Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx, ln) }()
	url := "http://" + ln.Addr().String() + "/events"
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	open := func(ctx context.Context) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("GET /events: %s, %s", resp.Status, ct)
		}
		// Two snapshots: the latest at once, then the next look's.
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for n := 0; n < 2 && sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "data: {") {
				n++
			}
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
		return resp
	}
	// Browsers that go away: each stream's request is cancelled.
	for range 20 {
		rctx, rcancel := context.WithCancel(ctx)
		resp := open(rctx)
		rcancel()
		resp.Body.Close()
	}
	// Streams still open when Serve stops: they end, and Serve returns.
	var resps []*http.Response
	for range 5 {
		resps = append(resps, open(ctx))
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30s with event streams open")
	}
	for _, resp := range resps {
		resp.Body.Close()
	}
}

// On a Cluster the dashboard finds the locks of every master; past
// MaxLocks it shows the first by name and says how many more there are.
func TestClusterAndCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cluster := servertest.ClusterClient(t, servertest.RedisCluster(t, 3))
	c := newClient(t, cluster, fencelock.WithNamespace("app"))
	other := newClient(t, cluster, fencelock.WithNamespace("app:other"))
	for i := range 12 { // enough names to land on every master
		if _, err := c.TryAcquire(ctx, fmt.Sprintf("k%02d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.TryAcquire(ctx, "k99", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, url := serve(t, cluster, dashboard.Options{Namespace: "app"})
	s := waitState(t, ctx, url, "showing 12 locks", func(s dashboard.Snapshot) bool { return len(s.Locks) == 12 })
	if s.Total != 12 || s.More != 0 || s.Locks[0].Key != "k00" || s.Locks[11].Key != "k11" {
		t.Errorf("total %d, more %d, keys %s..%s; want 12, 0, k00..k11", s.Total, s.More, s.Locks[0].Key, s.Locks[11].Key)
	}

	_, url = serve(t, cluster, dashboard.Options{Namespace: "app", MaxLocks: 5})
	s = waitState(t, ctx, url, "showing 5 locks", func(s dashboard.Snapshot) bool { return len(s.Locks) == 5 })
	if s.Total != 12 || s.More != 7 || s.Locks[4].Key != "k04" {
		t.Errorf("capped at 5: total %d, more %d, last %s; want 12, 7, k04", s.Total, s.More, s.Locks[4].Key)
	}
}

func TestNewRefuses(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, tc := range []struct {
		opts dashboard.Options
		want string
	}{
		{dashboard.Options{Namespace: "a{b}"}, `"a{b}"`},
		{dashboard.Options{Interval: time.Millisecond}, `"1ms"`},
		{dashboard.Options{MaxLocks: -1}, `"-1"`},
		{dashboard.Options{MaxEvents: 20_000}, `"20000"`},
	} {
		if _, err := dashboard.New(rdb, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v; want an error naming %s", tc.opts, err, tc.want)
		}
	}
}

// A release that a waiter is told of (a message on the lock's release
// channel, or for a fair waiter granted the lock, on its process's own
// channel) makes the dashboard look at once, not at its next interval:
// here a minute away. That look races with the waiter's acquire, so it
// sees either the lock passed on or the lock released.
func TestReleaseMessage(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testReleaseMessage(t, nil) })
	t.Run("fair", func(t *testing.T) { testReleaseMessage(t, []fencelock.AcquireOption{fencelock.WithFairness()}) })
}

func testReleaseMessage(t *testing.T, opts []fencelock.AcquireOption) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	srv := servertest.Redis(t)
	rdb := redisClient(t, srv.Addr())
	a, b := newClient(t, rdb), newClient(t, rdb)
	la, err := a.TryAcquire(ctx, "orders:7", time.Minute, opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, url := serve(t, rdb, dashboard.Options{Interval: time.Minute})
	waitState(t, ctx, url, "showing the lock", func(s dashboard.Snapshot) bool { return len(s.Locks) == 1 })

	got := make(chan *fencelock.Lock, 1)
	go func() {
		lb, err := b.Acquire(ctx, "orders:7", time.Minute, opts...) // waits: subscribes, marks the lock waited for
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	// The waiter is subscribed once Redis counts it (a fair waiter: to its
	// own channel too).
	if !poll(func() bool {
		n, err := rdb.PubSubNumSub(ctx, "lock:{orders:7}:released").Result()
		if err != nil {
			t.Fatal(err)
		}
		own, err := rdb.PubSubChannels(ctx, "lock:grants:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n["lock:{orders:7}:released"] > 0 && (opts == nil || len(own) > 0)
	}) {
		t.Fatalf("the waiter was not subscribed within %v", seeWithin)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	defer lb.Release(ctx)
	s := waitState(t, ctx, url, "showing the release or the hand-off", func(s dashboard.Snapshot) bool {
		return len(s.Events) > 0
	})
	switch e := s.Events[0]; {
	case e.Kind == dashboard.EventHandoff && e.PrevFence == la.Fence() && e.Fence == lb.Fence():
	case e.Kind == dashboard.EventReleased && e.Fence == la.Fence():
	default:
		t.Errorf("events %+v; want a hand-off from fence %d to %d, or a release of %d", s.Events, la.Fence(), lb.Fence(), la.Fence())
	}
}

// The permits of a semaphore and the holds of a read-write lock have rows
// of their own, beside the plain locks, with their kinds; a waiter for a
// permit is counted once; a permit released makes an event of its kind.
func TestEveryKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	srv := servertest.Redis(t)
	rdb := redisClient(t, srv.Addr())
	c, waiter := newClient(t, rdb), newClient(t, rdb)
	var permits []*fencelock.Lock
	for range 2 {
		lk, err := c.Semaphore("partner-api", 2).TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, lk)
	}
	if _, err := c.RWLock("doc").TryAcquireWrite(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "job", time.Minute); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() { waiter.Semaphore("partner-api", 2).Acquire(wctx, time.Minute); close(waited) }()
	defer func() { stop(); <-waited }()

	_, url := serve(t, rdb, dashboard.Options{Interval: 100 * time.Millisecond})
	s := waitState(t, ctx, url, "showing 4 rows and the permit's waiter", func(s dashboard.Snapshot) bool {
		return len(s.Locks) == 4 && s.Waiters == 1
	})
	var kinds []string
	for _, l := range s.Locks {
		kinds = append(kinds, l.Key+"/"+l.Kind)
	}
	if got, want := strings.Join(kinds, " "), "doc/write job/lock partner-api/permit partner-api/permit"; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
	if err := permits[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, url, "showing the permit's release", func(s dashboard.Snapshot) bool {
		for _, e := range s.Events {
			if e.Kind == dashboard.EventReleased && e.HoldKind == "permit" && e.Fence == permits[0].Fence() {
				return true
			}
		}
		return false
	})
}
