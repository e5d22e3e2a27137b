package faultproxy_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

// TestMain fails the package if a test leaves a goroutine running (a
// proxy it did not close, a connection...).
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m))
}
