package fencelock_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/redisserver"
	"github.com/fencelock/fencelock/internal/servertest"
)

// exampleAddr is the address of the redis-server the examples use.
var exampleAddr string

// TestMain starts one redis-server for the examples (tests start their own).
// Without redis-server every test of this package would be skipped, so the
// package is skipped as a whole, or fails under FENCELOCK_REQUIRE_SERVERS=1.
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
	exampleAddr = srv.Addr()
	code := m.Run()
	srv.Close()
	os.Exit(code)
}
