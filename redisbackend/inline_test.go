package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/driver/drivertest"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/faultproxy"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// With go-redis's ContextTimeoutEnabled, go-redis ends a request at its
// context's deadline by itself, so the backend runs the request on the
// caller's goroutine instead of handing it to another one and watching the
// context (the hand-over would cost as much client CPU as the request).

// callerHook records, for each lock script go-redis processes, whether it
// runs on a goroutine whose stack holds the function named by caller.
type callerHook struct {
	caller         string
	inline, hopped atomic.Int64
}

func (h *callerHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *callerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *callerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			buf := make([]byte, 64<<10)
			if strings.Contains(string(buf[:runtime.Stack(buf, false)]), h.caller) {
				h.inline.Add(1)
			} else {
				h.hopped.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}

func TestInlineRequests(t *testing.T) {
	srv := servertest.Redis(t)
	for _, tc := range []struct {
		contextTimeouts bool
		wantInline      bool
	}{
		{contextTimeouts: true, wantInline: true},
		{contextTimeouts: false, wantInline: false},
	} {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: tc.contextTimeouts})
		hook := &callerHook{caller: "redisbackend_test.TestInlineRequests"}
		rdb.AddHook(hook)
		c := fencelock.New(redisbackend.New(rdb))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		lk, err := c.Acquire(ctx, "inline", 10*time.Second)
		if err == nil {
			err = lk.Release(ctx)
		}
		cancel()
		c.Close()
		rdb.Close()
		if err != nil {
			t.Fatal(err)
		}
		inline, hopped := hook.inline.Load(), hook.hopped.Load()
		if tc.wantInline && (inline != 2 || hopped != 0) {
			t.Errorf("ContextTimeoutEnabled: %d scripts on the caller's goroutine, %d on another; want 2 and 0", inline, hopped)
		}
		if !tc.wantInline && (inline != 0 || hopped != 2) {
			t.Errorf("default options: %d scripts on the caller's goroutine, %d on another; want 0 and 2 (go-redis would not end them at the deadline)", inline, hopped)
		}
	}
}

// A request on the caller's goroutine still ends at its context's deadline
// when the server does not answer, and one that never left the client (the
// only connection was busy) is reported as not sent.
func TestInlineRequestsEndAtDeadline(t *testing.T) {
	for _, contextTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", contextTimeouts), func(t *testing.T) {
			testInlineRequestsEndAtDeadline(t, contextTimeouts)
		})
	}
}

func testInlineRequestsEndAtDeadline(t *testing.T, contextTimeouts bool) {
	srv := servertest.Redis(t)
	proxy := faultproxy.New(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{
		Addr: proxy.Addr(), ContextTimeoutEnabled: contextTimeouts, MaxRetries: -1,
		// Far beyond the deadlines below: only the context can end a call.
		ReadTimeout: time.Minute, WriteTimeout: time.Minute, PoolSize: 1, PoolTimeout: time.Minute,
	})
	t.Cleanup(func() { rdb.Close() })
	b := redisbackend.New(rdb)
	t.Cleanup(func() { b.Close() })
	bg := context.Background()
	if err := rdb.Ping(bg).Err(); err != nil {
		t.Fatal(err)
	}
	req := driver.Request{Ref: driver.Ref{Namespace: "inline", Key: "k", Token: "t1"}, Owner: "t1", TTL: 10 * time.Second}

	resume := proxy.StallReplies()
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	start := time.Now()
	_, err := b.Acquire(ctx, req)
	cancel()
	took := time.Since(start)
	resume()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, fencelock.ErrNotSent) {
		t.Fatalf("acquire with the replies stalled: %v, want a deadline error (sent)", err)
	}
	if took > 20*time.Second {
		t.Fatalf("acquire with the replies stalled returned after %v, not at its 300ms deadline", took)
	}

	// The pool's one connection is busy with a blocking command: the
	// acquire never gets to write, and says so.
	blocked := make(chan error, 1)
	go func() { blocked <- rdb.BLPop(bg, 3*time.Second, "inline-nothing").Err() }()
	// In flight: the server has it, blocked.
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { direct.Close() })
	pollUntil(t, 30*time.Second, "the BLPOP in flight", func() bool {
		info, err := direct.Info(bg, "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(info, "blocked_clients:1\r\n")
	})
	ctx, cancel = context.WithTimeout(bg, 200*time.Millisecond)
	req.Token = "t2"
	_, err = b.Acquire(ctx, req)
	cancel()
	if !errors.Is(err, fencelock.ErrNotSent) {
		t.Errorf("acquire while the only connection is busy: %v, want ErrNotSent", err)
	}
	if err := <-blocked; !errors.Is(err, redis.Nil) {
		t.Errorf("BLPOP: %v", err)
	}
}

// The backend keeps its contract on the inline path.
func TestDriverContextTimeouts(t *testing.T) {
	srv := servertest.Redis(t)
	drivertest.Run(t, func(t *testing.T) driver.Store {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		b := redisbackend.New(rdb)
		t.Cleanup(func() { b.Close(); rdb.Close() })
		return b
	})
}

// The Backend cannot send a default client's requests through a clone of
// it with ContextTimeoutEnabled set on the clone's own options
// ((*redis.Client).WithTimeout shares the connection pool and copies the
// options), because the clone does not carry the client's hooks: the
// user's tracing and metrics would stop seeing fencelock's commands. This
// pins that go-redis behaviour; when it fails, go-redis's clones keep
// their parent's hooks and the Backend can take that path (no goroutine
// per request, as with ContextTimeoutEnabled) without changing the user's
// client.
func TestWithTimeoutCloneDropsHooks(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	hook := &callerHook{caller: "redisbackend_test.TestWithTimeoutCloneDropsHooks"}
	rdb.AddHook(hook)
	clone := rdb.WithTimeout(rdb.Options().ReadTimeout)
	if err := clone.Eval(context.Background(), "return 1", nil).Err(); err != nil {
		t.Fatal(err)
	}
	if seen := hook.inline.Load() + hook.hopped.Load(); seen != 0 {
		t.Errorf("the parent's hook saw %d scripts sent on a WithTimeout clone, want 0 (go-redis now copies hooks to clones)", seen)
	}
	if rdb.PoolStats().TotalConns != 1 {
		t.Errorf("the clone's command left %d connections in the parent's pool, want 1 (a shared pool)", rdb.PoolStats().TotalConns)
	}
}
