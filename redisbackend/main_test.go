package redisbackend_test

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine running: a
// go-redis client or Backend it did not close, a subscription...
//
// One goroutine is go-redis's own and ends by itself: the slot-map reload
// that a ClusterClient runs in the background (the Backend asks for one
// after a failure); against a cluster a test has just stopped, it can take
// a few dial timeouts to give up.
//
// go-redis logs every failed dial to stderr, hundreds of lines in a
// failover test; the tests report what matters themselves.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	leaktest.Main(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*clusterStateHolder).LazyReload.func1"),
	)
}

// quietLogger discards go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
