package memorybackend_test

import (
	"testing"

	"github.com/fencelock/fencelock/internal/leaktest"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}
