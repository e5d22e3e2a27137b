package main

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/internal/servertest"
	"github.com/redis/go-redis/v9"
)

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
