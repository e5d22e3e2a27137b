package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

func TestForceRelease(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("app"))
	defer c.Close()
	ctx := context.Background()
	lk, err := c.TryAcquire(fencelock.WithOwner(ctx, "worker-3"), "job:nightly", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI("force-release", "--redis", srv.Addr(), "--namespace", "app", "--reason", "worker-3 is gone (INC-7)", "job:nightly")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := fmt.Sprintf("job:nightly: released 1 hold(s) of owner worker-3 (fence %d)", lk.Fence()); !strings.Contains(out, want) {
		t.Errorf("output %q lacks %q", out, want)
	}
	if !strings.Contains(errOut, `level=WARN msg="fencelock: force release" key=job:nightly reason="worker-3 is gone (INC-7)" owner=worker-3`) {
		t.Errorf("stderr lacks the WARN line:\n%s", errOut)
	}
	next, err := c.TryAcquire(ctx, "job:nightly", time.Minute)
	if err != nil {
		t.Fatalf("after force-release: %v", err)
	}
	if next.Fence() <= lk.Fence() {
		t.Errorf("fence %d not above %d", next.Fence(), lk.Fence())
	}
	next.Release(ctx)
	if code, out, _ := runCLI("force-release", "--redis", srv.Addr(), "--namespace", "app", "--reason", "again", "job:nightly"); code != 0 || !strings.Contains(out, "not held") {
		t.Errorf("a free lock: exit %d, %q", code, out)
	}
	for _, args := range [][]string{
		{"force-release", "--redis", srv.Addr(), "job:nightly"},                    // no reason
		{"force-release", "--redis", srv.Addr(), "--reason", "x"},                  // no key
		{"force-release", "--redis", srv.Addr(), "--reason", "x", "a", "b"},        // two keys
		{"force-release", "--redis", srv.Addr(), "--reason", "   ", "job:nightly"}, // blank reason
	} {
		if code, _, errOut := runCLI(args...); code != 2 || !strings.Contains(errOut, "fencelock force-release:") {
			t.Errorf("%v: exit %d, %q; want 2 and a usage error", args, code, errOut)
		}
	}
}
