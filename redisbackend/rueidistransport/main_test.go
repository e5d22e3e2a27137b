package rueidistransport_test

import (
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

// redisAddr is the shared redis-server of the examples.
var redisAddr string

// TestMain starts the shared redis-server of the examples, and fails the
// package if a test leaves a goroutine running (a rueidis client or a
// Backend it did not close).
func TestMain(m *testing.M) {
	servertest.Main(m, func(addr string) { redisAddr = addr })
}
