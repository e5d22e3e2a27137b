package servertest_test

import (
	"testing"

	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/servertest"
)

// TestMain stops the shared PostgreSQL server (TestClosePostgres stops it
// too, but not when -run skips that test) and fails the package if a test
// leaves a goroutine running.
func TestMain(m *testing.M) {
	leaktest.Main(leaktest.Then(m, func(code int) int {
		if err := servertest.ClosePostgres(); err != nil && code == 0 {
			code = 1
		}
		return code
	}))
}
