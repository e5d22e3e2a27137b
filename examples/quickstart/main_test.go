package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// TestMain fails the package if a test leaves a goroutine running (a
// go-redis client it did not close, say).
func TestMain(m *testing.M) {
	leaktest.Main(m)
}

// The tour runs against a real redis-server and leaves no keys behind.
func TestRun(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	if err := run(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Fatalf("keys left behind: %v", keys)
	}
}

// With Redis unreachable the tour could not run: exit status 2 (as for
// every fencelock command), the error on one line; not log.Fatal's 1, the
// status of a failed check.
func TestUnreachableRedisCouldNotRun(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	var stderr strings.Builder
	if code := mainStatus(&stderr); code != 2 {
		t.Errorf("exit status %d, want 2; stderr %q", code, stderr.String())
	}
	if msg := strings.TrimSpace(stderr.String()); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "quickstart: ") ||
		strings.Count(msg, "quickstart:") != 1 {
		t.Errorf("stderr %q, want one line with one prefix", msg)
	}
}
