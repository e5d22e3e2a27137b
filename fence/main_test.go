package fence_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/redisserver"
	"github.com/fencelock/fencelock/internal/servertest"
)

// exampleAddr is the redis-server the examples use; tests start their own.
var exampleAddr string

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
	servertest.ClosePostgres()
	os.Exit(code)
}
