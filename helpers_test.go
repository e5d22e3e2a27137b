package fencelock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// startRedis starts a private redis-server and returns it with a go-redis
// client for it, both closed at cleanup.
func startRedis(t testing.TB) (*redisserver.Server, *redis.Client) {
	t.Helper()
	srv := servertest.Redis(t)
	return srv, newRedisClient(t, srv.Addr())
}

// newRedisClient returns a go-redis client for addr, closed at cleanup. Its
// timeouts are short so that tests of a dead server finish quickly.
func newRedisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newClient returns a fencelock Client on rdb, closed at cleanup.
func newClient(t testing.TB, rdb redis.UniversalClient, opts ...fencelock.Option) *fencelock.Client {
	t.Helper()
	c := fencelock.New(redisbackend.New(rdb), opts...)
	t.Cleanup(func() { c.Close() })
	return c
}

// ctxTimeout returns a context that ends after d, cancelled at cleanup.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitDone waits for ch to close, failing the test after limit.
func waitDone(t testing.TB, ch <-chan struct{}, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("%s: not within %v", what, limit)
		return 0
	}
}

// batchHook counts round trips (pipelines, and lone script calls) and the
// scripts' work in them: a pipeline's commands, or a lone script's keys (the
// Redis backend renews a batch on one node in one script, with a key per
// lock).
type batchHook struct {
	mu              sync.Mutex
	pipelines, cmds int
}

func (h *batchHook) reset() (pipelines, cmds int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pipelines, cmds = h.pipelines, h.cmds
	h.pipelines, h.cmds = 0, 0
	return pipelines, cmds
}

func (h *batchHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *batchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			if keys, ok := cmd.Args()[2].(int); ok {
				h.mu.Lock()
				h.pipelines++
				h.cmds += keys
				h.mu.Unlock()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *batchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		h.cmds += len(cmds)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// locksOnly is a store of plain locks only, with no capability: the
// Client refuses the other kinds before sending anything.
type locksOnly struct{ driver.Store }

func (locksOnly) Supports(k driver.Kind) bool { return k == driver.KindLock }
