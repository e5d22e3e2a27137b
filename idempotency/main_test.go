package idempotency_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/redisserver"
	"github.com/fencelock/fencelock/internal/servertest"
)

// TestMain checks that redis-server is there (every test and the example
// need one): without it the package is skipped, or fails under
// FENCELOCK_REQUIRE_SERVERS=1. It stops the shared PostgreSQL at the end.
func TestMain(m *testing.M) {
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		if errors.Is(err, redisserver.ErrNotFound) && !servertest.RequireServers() {
			fmt.Printf("skipping: %v (set %s=1 to fail instead)\n", err, servertest.EnvRequireServers)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "starting redis-server for the examples: %v\n", err)
		os.Exit(1)
	}
	srv.Close()
	code := m.Run()
	servertest.ClosePostgres()
	os.Exit(code)
}
