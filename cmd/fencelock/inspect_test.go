package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/fencelock/fencelock/redisbackend"
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

	lk.Release(ctx)
	if _, out, _ := runCLI("inspect", "--redis", srv.Addr(), "--namespace", "app", "job:nightly"); !strings.Contains(out, "state     free") {
		t.Fatalf("after release:\n%s", out)
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
// usage error, so no pointer to -h. Before, a bad namespace exited 1 with
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
