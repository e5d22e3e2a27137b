package redisbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// Client.Check reports at start-up what would otherwise fail every lock:
// a namespace with a brace, an invalid backend option, a
// server that cannot be reached; and nothing for a good configuration.
func TestClientCheck(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	good := fencelock.New(redisbackend.New(rdb))
	defer good.Close()
	if err := good.Check(ctx); err != nil {
		t.Fatalf("Check of a good configuration: %v", err)
	}

	braces := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace("a{b}"))
	defer braces.Close()
	err := braces.Check(ctx)
	if !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "a{b}") {
		t.Fatalf("Check with namespace a{b}: %v, want ErrInvalidArgument naming it", err)
	}

	badAck := fencelock.New(redisbackend.New(rdb, redisbackend.WithReplicaAck(0, time.Second)))
	defer badAck.Close()
	if err := badAck.Check(ctx); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Check with WithReplicaAck(0, 1s): %v, want ErrInvalidArgument", err)
	}

	badMargin := fencelock.New(redisbackend.New(rdb), fencelock.WithSafetyMargin(2))
	defer badMargin.Close()
	if err := badMargin.Check(ctx); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("Check with WithSafetyMargin(2): %v, want ErrInvalidArgument", err)
	}

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { down.Close() })
	unreachable := fencelock.New(redisbackend.New(down))
	defer unreachable.Close()
	if err := unreachable.Check(ctx); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Check of an unreachable server: %v, want ErrUnavailable", err)
	}
}

// Check's error for a server that cannot be reached says so on one line.
func TestClientCheckMessage(t *testing.T) {
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { down.Close() })
	c := fencelock.New(redisbackend.New(down))
	defer c.Close()
	err := c.Check(context.Background())
	if msg := err.Error(); !strings.HasPrefix(msg, "fencelock: check: backend unavailable: redisbackend: PING: ") || strings.Contains(msg, "\n") {
		t.Fatalf("message %q", msg)
	}
}
