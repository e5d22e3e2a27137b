package memorybackend_test

import (
	"testing"

	"github.com/fencelock/fencelock/testing/leaktest"
)

// TestMain fails the package if a test leaves a goroutine running.
func TestMain(m *testing.M) {
	leaktest.Main(m)
}
