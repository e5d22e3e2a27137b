package main

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/servertest"
)

// TestMain runs the test binary as a service instance when the load test
// starts it as one (it re-executes its own binary, which in tests is this
// one); otherwise it runs the tests.
func TestMain(m *testing.M) {
	if os.Getenv(EnvChild) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	if path := os.Getenv(envOpenChild); path != "" {
		os.Exit(openStoreChild(path))
	}
	leaktest.Main(leaktest.Then(m, func(code int) int {
		if err := servertest.ClosePostgres(); err != nil && code == 0 {
			code = 1
		}
		return code
	}))
}
