package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// newLockClient is a Client on addr's Redis in namespace ns.
func newLockClient(t *testing.T, addr, ns string, opts ...fencelock.Option) *fencelock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c := fencelock.New(redisbackend.New(rdb), append([]fencelock.Option{fencelock.WithNamespace(ns)}, opts...)...)
	t.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	return c
}

// fencelock ls: every held lock of the namespace, and only those, with its
// token, owner, identity (when its Client gave one), fence, lease, holds.
func TestLs(t *testing.T) {
	srv := servertest.Redis(t)
	named := newLockClient(t, srv.Addr(), "app", fencelock.WithIdentity("billing-7:4242"))
	anon := newLockClient(t, srv.Addr(), "app")
	elsewhere := newLockClient(t, srv.Addr(), "other")
	ctx := context.Background()

	if code, out, errOut := runCLI("ls", "--redis", srv.Addr(), "--namespace", "app"); code != 0 || out != "no locks held in namespace \"app\"\n" {
		t.Fatalf("no locks: exit %d, %q, %q", code, out, errOut)
	}
	a, err := named.TryAcquire(fencelock.WithOwner(ctx, "worker-3"), "orders:42", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := anon.TryAcquire(ctx, "report", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := elsewhere.TryAcquire(ctx, "hidden", time.Minute); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI("ls", "--redis", srv.Addr(), "--namespace", "app")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^KEY +KIND +TOKEN +OWNER +IDENTITY +FENCE +TTL +HOLDS +WAITERS$`).MatchString(lines[0]) {
		t.Fatalf("want a header and 2 locks:\n%s", out)
	}
	for i, want := range []string{
		// The lease: a minute less the time the test took, to 100 ms.
		fmt.Sprintf(`^orders:42 +lock +%s… +worker-3 +billing-7:4242 +%d +(\d+(\.\d)?s|1m0s) +1 +0$`, regexp.QuoteMeta(a.Token()[:8]), a.Fence()),
		fmt.Sprintf(`^report +lock +%s… +- +- +%d +(\d+(\.\d)?s|1m0s) +1 +0$`, regexp.QuoteMeta(b.Token()[:8]), b.Fence()),
	} {
		if !regexp.MustCompile(want).MatchString(lines[i+1]) {
			t.Errorf("line %d: %q, want %s", i+1, lines[i+1], want)
		}
	}

	// --json is an array, with the full tokens.
	code, out, _ = runCLI("ls", "--json", "--redis", srv.Addr(), "--namespace", "app")
	var got []struct {
		Key      string   `json:"key"`
		Kind     string   `json:"kind"`
		LockKey  string   `json:"lock_key"`
		Owner    string   `json:"owner"`
		Tokens   []string `json:"tokens"`
		Identity string   `json:"identity"`
		Fence    int64    `json:"fence"`
		TTL      int64    `json:"ttl_ms"`
		Holds    int      `json:"holds"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 2 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if g := got[0]; g.Key != "orders:42" || g.Kind != "lock" || g.LockKey != "app:{orders:42}:lock" || g.Owner != "worker-3" || g.Identity != "billing-7:4242" ||
		len(g.Tokens) != 1 || g.Tokens[0] != a.Token() || g.Fence != a.Fence() || g.TTL <= 0 || g.Holds != 1 {
		t.Errorf("--json lock 0: %+v", g)
	}
	if g := got[1]; g.Key != "report" || g.Identity != "" || g.Owner != b.Token() {
		t.Errorf("--json lock 1: %+v", g)
	}
	if strings.Contains(out, `"identity":""`) {
		t.Errorf("--json shows an empty identity: %s", out)
	}

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, out, _ := runCLI("ls", "--redis", srv.Addr(), "--namespace", "app"); strings.Contains(out, "orders:42") || !strings.Contains(out, "report") {
		t.Errorf("after a release:\n%s", out)
	}
}

// On a Cluster, ls scans every master.
func TestLsCluster(t *testing.T) {
	cluster := servertest.RedisCluster(t, 3)
	rdb := servertest.ClusterClient(t, cluster)
	c := fencelock.New(redisbackend.New(rdb))
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for i := range 9 {
		if _, err := c.TryAcquire(ctx, fmt.Sprintf("k%d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI("ls", "--redis", strings.Join(cluster.Addrs(), ","), "--json")
	var got []struct{ Key string }
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 9 {
		t.Fatalf("exit %d, %v, %d locks, want 9:\n%s%s", code, err, len(got), out, errOut)
	}
}

func TestLsBadUsage(t *testing.T) {
	srv := servertest.Redis(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ls", "--redis", srv.Addr(), "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"ls", "--redis", "127.0.0.1:1"}, 2, "cannot reach Redis"},
		{[]string{"ls", "--redis", "redis://:hunter2pass@local host:6379/0"}, 2, "invalid --redis URL"},
		{[]string{"ls", "--bogus"}, 2, "flag provided but not defined"},
	} {
		code, _, errOut := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "hunter2") {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
