package fencelock_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// syncBuffer is a bytes.Buffer safe for the Client's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestLogging(t *testing.T) {
	_, rdb := startRedis(t)
	var out syncBuffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newClient(t, rdb, fencelock.WithLogger(logger))
	ctx := ctxTimeout(t, 10*time.Second)

	lk, err := c.TryAcquire(ctx, "logged", time.Minute, fencelock.WithAutoRenew(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "lock:{logged}:lock")
	waitDone(t, lk.Done(), 2*time.Second, "loss")
	lk.Release(ctx)
	gone, err := c.TryAcquire(ctx, "gone", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "lock:{gone}:lock")
	gone.Release(ctx) // finds it gone
	ok, _ := c.TryAcquire(ctx, "fine", time.Minute)
	ok.Release(ctx)

	logs := out.String()
	short := lk.Token()[:8]
	for _, want := range []string{
		`msg="fencelock: acquired" key=logged fence=`,
		`level=WARN msg="fencelock: lock lost" key=logged`,
		`level=WARN msg="fencelock: release skipped: not owner (the lock had expired or was taken over)" key=gone`,
		`msg="fencelock: released" key=fine`,
		"token=" + short,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, lk.Token()) {
		t.Error("a whole owner token was logged")
	}

	// Silent by default.
	quiet := newClient(t, rdb)
	if lk, err := quiet.TryAcquire(context.Background(), "quiet", time.Second); err == nil {
		lk.Release(ctx)
	}
}
