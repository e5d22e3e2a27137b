package main

import (
	"context"
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/redis/go-redis/v9"
)

// TestMain fails the package if a test leaves a goroutine running (a
// go-redis client it did not close, say).
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m))
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
