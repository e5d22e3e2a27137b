package faultproxy_test

import (
	"testing"

	"github.com/fencelock/fencelock/testing/leaktest"
)

// TestMain fails the package if a test leaves a goroutine running (a
// proxy it did not close, a connection...).
func TestMain(m *testing.M) {
	leaktest.Main(m)
}
