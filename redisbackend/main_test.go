package redisbackend_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

// TestMain fails the package if a test leaves a goroutine running: a
// go-redis client or Backend it did not close, a subscription...
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m))
}
