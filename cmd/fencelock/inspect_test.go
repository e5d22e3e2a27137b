package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

func TestInspect(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("app"))
	defer c.Close()
	ctx := context.Background()
	lk, err := c.TryAcquire(fencelock.WithOwner(ctx, "worker-3"), "job:nightly", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI("inspect", "--redis", srv.Addr(), "--namespace", "app", "job:nightly", "job:other")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"app:{job:nightly}:lock", "state     held, 1 hold(s), lease ends in", "owner     worker-3",
		fmt.Sprintf("fence     %d", lk.Fence()), "never expires", "app:{job:other}:lock", "state     free",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = runCLI("inspect", "--json", "--redis", "redis://"+srv.Addr()+"/0", "--namespace", "app", "job:nightly")
	var got struct {
		Held  bool  `json:"held"`
		Fence int64 `json:"fence"`
		TTL   int64 `json:"ttl_ms"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !got.Held || got.Fence != lk.Fence() || got.TTL <= 0 {
		t.Fatalf("--json: exit %d, %s", code, out)
	}

	// The full Redis key names its namespace; flags may follow the key.
	code, out, errOut = runCLI("inspect", "app:{job:nightly}:lock", "--json", "--redis", srv.Addr())
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !got.Held || got.Fence != lk.Fence() {
		t.Fatalf("by full key, flags after it: exit %d, %s%s", code, out, errOut)
	}
	if code, _, errOut := runCLI("inspect", "--namespace", "other", "app:{job:nightly}:lock", "--redis", srv.Addr()); code != 2 ||
		!strings.Contains(errOut, `key "app:{job:nightly}:lock" is in namespace "app", not --namespace "other"`) {
		t.Errorf("a full key and another --namespace: exit %d, %q", code, errOut)
	}

	lk.Release(ctx)
	if _, out, _ := runCLI("inspect", "--redis", srv.Addr(), "--namespace", "app", "job:nightly"); !strings.Contains(out, "state     free") {
		t.Fatalf("after release:\n%s", out)
	}
}

// A holder's identity (fencelock.WithIdentity) is shown, and only when it
// gave one.
func TestInspectIdentity(t *testing.T) {
	srv := servertest.Redis(t)
	named := newLockClient(t, srv.Addr(), "lock", fencelock.WithIdentity("billing-7:4242"))
	anon := newLockClient(t, srv.Addr(), "lock")
	ctx := context.Background()
	if _, err := named.TryAcquire(ctx, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := anon.TryAcquire(ctx, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("inspect", "a", "b", "--redis", srv.Addr())
	a, b, _ := strings.Cut(out, "lock:{b}:lock")
	if code != 0 || !strings.Contains(a, "  identity  billing-7:4242\n") || strings.Contains(b, "identity") {
		t.Errorf("exit %d:\n%s%s", code, out, errOut)
	}
	_, out, _ = runCLI("inspect", "--json", "--redis", srv.Addr(), "a", "b")
	if lines := strings.Split(out, "\n"); !strings.Contains(lines[0], `"identity":"billing-7:4242"`) || strings.Contains(lines[1], "identity") {
		t.Errorf("--json:\n%s", out)
	}
}

func TestInspectBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect"}, "no KEY given"},
		{[]string{"inspect", "--watch", "-1s", "k"}, "invalid --watch -1s"},
		{[]string{"inspect", "--redis", "redis://:x@127.0.0.1:1/0", "k"}, "cannot reach Redis"},
		{[]string{"inspect", "--redis", "redis://:hunter2pass@local host:6379/0", "k"}, "invalid --redis URL"},
		{[]string{"inspect", "--redis", "127.0.0.1:1", "--namespace", "a{b", "k"}, "cannot reach Redis"},
	} {
		code, _, errOut := runCLI(tc.args...)
		if strings.Contains(errOut, "hunter2") {
			t.Errorf("%v: the password is in the error: %q", tc.args, errOut)
		}
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	srv := servertest.Redis(t)
	code, _, errOut := runCLI("inspect", "--redis", srv.Addr(), "--namespace", "a{b", "k")
	if code != 2 || !strings.Contains(errOut, `namespace "a{b"`) {
		t.Errorf("bad namespace: exit %d, %q", code, errOut)
	}
}

// "Could not run" is exit status 2 for every command, with the error on
// one line and without "fencelock:" twice; an unreachable Redis is no
// usage error, so no pointer to -h. A bad namespace must not exit 1 with
// "fencelock inspect: k: fencelock: invalid namespace ...".
func TestInspectCouldNotRun(t *testing.T) {
	srv := servertest.Redis(t)
	for _, args := range [][]string{
		{"inspect", "--redis", "127.0.0.1:1", "k"},
		{"inspect", "--redis", srv.Addr(), "--namespace", "a{b", "k"},
	} {
		code, _, errOut := runCLI(args...)
		if code != 2 || strings.Count(errOut, "fencelock") != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 ||
			strings.Contains(errOut, "-h for usage") {
			t.Errorf("%v: exit %d, %q; want 2 and one line with one fencelock prefix", args, code, errOut)
		}
	}
}
