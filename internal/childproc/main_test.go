package childproc_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/leakcheck"
)

// TestMain fails the package if a test leaves a goroutine running.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m))
}
