package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// syncBuffer is a bytes.Buffer the test reads while the command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fencelock watch prints the namespace's table, then again each time a
// lock is taken or released (not as leases count down), and stops after
// --count tables.
func TestWatch(t *testing.T) {
	srv := servertest.Redis(t)
	c := newLockClient(t, srv.Addr(), "app", fencelock.WithIdentity("web-2:99"))
	ctx := context.Background()
	lk, err := c.TryAcquire(ctx, "orders:42", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"watch", "--redis", srv.Addr(), "--namespace", "app", "--interval", "100ms", "--count", "3"}, &out, &errOut)
	}()
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		if !pollFor(20*time.Second, func() bool { return ok(out.String()) }) {
			t.Fatalf("no %s in 20s; stdout:\n%s\nstderr:\n%s", what, out.String(), errOut.String())
		}
	}
	waitFor("first table", func(s string) bool { return strings.Contains(s, "orders:42") })
	// Several intervals pass with nothing changed but the lease: no table.
	// Each interval is a SCAN of the namespace, which the server counts.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	scans := func() int {
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := scanCalls.FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	from := scans()
	if !pollFor(20*time.Second, func() bool { return scans() >= from+5 }) {
		t.Fatalf("fewer than 5 intervals of the watch in 20s (SCANs %d, from %d)", scans(), from)
	}
	if n := strings.Count(out.String(), "--- "); n != 1 {
		t.Fatalf("%d tables while nothing changed, want 1:\n%s", n, out.String())
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("table after the release", func(s string) bool { return strings.Contains(s, `0 held in namespace "app"`) })
	if _, err := c.TryAcquire(ctx, "report", time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("watch did not stop after 3 tables:\n%s", out.String())
	}
	tables := strings.Split(out.String(), "--- ")[1:]
	if len(tables) != 3 || !strings.Contains(tables[0], "1 held") || !strings.Contains(tables[0], "web-2:99") ||
		!strings.Contains(tables[1], "0 held") || strings.Contains(tables[1], "KEY") || !strings.Contains(tables[2], "report") {
		t.Errorf("want 3 tables: orders:42, none, report:\n%s", out.String())
	}
}

func TestWatchBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", "--interval", "10ms"}, "invalid --interval 10ms"},
		{[]string{"watch", "--count", "-1"}, "invalid --count -1"},
		{[]string{"watch", "now"}, `unexpected argument "now"`},
	} {
		if code, _, errOut := runCLI(tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// scanCalls finds the count of SCANs in INFO commandstats.
var scanCalls = regexp.MustCompile(`cmdstat_scan:calls=(\d+)`)

// pollFor polls cond until it holds (true) or limit has passed (false).
// The limit only bounds a hang: make it generous (the machine may be
// loaded).
func pollFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
