package servertest_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
	"github.com/fencelock/fencelock/internal/servertest"
)

// TestMain stops the shared PostgreSQL server (TestClosePostgres stops it
// too, but not when -run skips that test) and fails the package if a test
// leaves a goroutine running.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := servertest.ClosePostgres(); err != nil && code == 0 {
		code = 1
	}
	os.Exit(leakcheck.Verify(code))
}
