package redisbackend_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// A go-redis client without ContextTimeoutEnabled costs every request a
// goroutine of its own: New says so once through the logger of WithLogger,
// naming the option, and says nothing for a client that has it. No server
// is needed: New only reads the client's options.
func TestWithLoggerDefaultClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    redis.Options
		records int
	}{
		{"default client", redis.Options{Addr: "127.0.0.1:1"}, 1},
		{"ContextTimeoutEnabled", redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			rdb := redis.NewClient(&tc.opts)
			defer rdb.Close()
			b := redisbackend.New(rdb, redisbackend.WithLogger(logger), redisbackend.WithoutReleaseNotifications())
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if logs.Len() == 0 {
				lines = nil
			}
			if len(lines) != tc.records {
				t.Fatalf("logged %d records, want %d:\n%s", len(lines), tc.records, logs.String())
			}
			if tc.records > 0 && (!strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "ContextTimeoutEnabled")) {
				t.Errorf("logged %q, want a warning that names ContextTimeoutEnabled", lines[0])
			}
		})
	}
}
