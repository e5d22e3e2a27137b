package exitcode

import (
	"errors"
	"fmt"
	"testing"
)

func TestMessage(t *testing.T) {
	lost := errors.New("fencelock: lock lost")
	for _, tc := range []struct {
		prefix string
		err    error
		want   string
	}{
		{"fencelock demo", fmt.Errorf("fencelock: invalid ttl 0s: must be positive"), "fencelock demo: invalid ttl 0s: must be positive"},
		{"fencelock inspect", fmt.Errorf("k: %w", lost), "fencelock inspect: k: lock lost"},
		{"orderservice", errors.Join(errors.New("invalid -lock-ttl 1ms: must be at least 3ms"), errors.New("invalid -work-delay -1s: must not be negative")),
			"orderservice: invalid -lock-ttl 1ms: must be at least 3ms; invalid -work-delay -1s: must not be negative"},
		{"orderservice loadtest", errors.New("redis-server not found\n(install it with scripts/setup.sh)"), "orderservice loadtest: redis-server not found; (install it with scripts/setup.sh)"},
		{"quickstart", errors.New("idempotency: x: fencelock: unavailable"), "quickstart: idempotency: x: fencelock: unavailable"},
	} {
		if got := Message(tc.prefix, tc.err); got != tc.want {
			t.Errorf("Message(%q, %q) = %q, want %q", tc.prefix, tc.err, got, tc.want)
		}
	}
}
