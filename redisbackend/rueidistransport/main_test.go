package rueidistransport_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

// TestMain starts the shared redis-server of the examples, which find it
// as a user's program would, in the environment, and fails the
// package if a test leaves a goroutine running (a rueidis client or a
// Backend it did not close).
func TestMain(m *testing.M) {
	servertest.Main(m, func(addr string) { os.Setenv("REDIS_ADDR", addr) })
}
