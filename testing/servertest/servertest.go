// Package servertest provides test helpers that start throwaway real
// servers (redis-server and its topologies, PostgreSQL) for the duration of
// a test, and for the demo.
//
// It is the test harness of fencelock's own modules (the library, cmd,
// etcdbackend, fencelockprom), public so that each of them can use it; it
// is not part of the library's API, and no library package imports it.
package servertest

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/fencelock/fencelock/testing/childproc"
	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/redisserver"
)

// EnvRequireServers names the environment variable that, when "1", turns a
// missing server binary from a skipped test into a failed one (for CI).
const EnvRequireServers = "FENCELOCK_REQUIRE_SERVERS"

// logTailLines is how many server log lines a failed test logs at cleanup.
const logTailLines = 40

// RequireServers reports whether FENCELOCK_REQUIRE_SERVERS=1, i.e. whether
// tests must fail rather than skip when a server binary is missing.
func RequireServers() bool {
	return os.Getenv(EnvRequireServers) == "1"
}

// Redis starts a private redis-server for the test, with args appended to
// redisserver's defaults, and registers its Close with t.Cleanup. If the test
// has failed by cleanup time, the last lines of the server log are logged.
//
// If redis-server is missing, the test is skipped, or fails when
// RequireServers reports true; the message names the missing binary and how
// to install it. Any other start failure fails the test.
func Redis(t testing.TB, args ...string) *redisserver.Server {
	t.Helper()
	srv, err := redisserver.Start(redisserver.Options{Args: args, Logf: t.Logf})
	if errors.Is(err, redisserver.ErrNotFound) {
		if RequireServers() {
			t.Fatalf("servertest: %v (%s=1, so this is a failure)", err, EnvRequireServers)
		}
		t.Skipf("servertest: skipping: %v (set %s=1 to fail instead)", err, EnvRequireServers)
	}
	if err != nil {
		t.Fatalf("servertest: starting redis-server: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("servertest: redis-server %s log, last %d lines:\n%s",
				srv.Addr(), logTailLines, childproc.Tail(srv.Log(), logTailLines))
		}
		if err := srv.Close(); err != nil {
			t.Errorf("servertest: closing redis-server: %v", err)
		}
	})
	return srv
}

// Main is for a package's TestMain when its tests and examples need
// redis-server: it starts one shared server, passes its address to use
// (examples cannot start servers of their own), runs the tests, stops the
// shared servers (this one and the shared PostgreSQL), checks that the
// tests left no goroutine running (go.uber.org/goleak with the options of
// testing/leaktest: a go-redis client a test forgot to close fails the
// package) and exits. Without redis-server the whole package is skipped, or
// fails when RequireServers.
func Main(m *testing.M, use func(redisAddr string)) {
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		if errors.Is(err, redisserver.ErrNotFound) && !RequireServers() {
			fmt.Printf("skipping: %v (set %s=1 to fail instead)\n", err, EnvRequireServers)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "servertest: starting redis-server: %v\n", err)
		os.Exit(1)
	}
	if use != nil {
		use(srv.Addr())
	}
	leaktest.Main(leaktest.Then(m, func(code int) int {
		srv.Close()
		ClosePostgres()
		return code
	}))
}
