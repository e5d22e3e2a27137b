package fencelock_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

// parallelTests is how many of the package's parallel tests run at once
// when the command line does not say (-test.parallel). They are the tests
// that spend their time waiting on a server of their own, a child process
// or a lease, not on the CPU: go test's default (GOMAXPROCS, 2 on CI)
// would run them nearly one after the other.
const parallelTests = 8

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(parallelTests))
	}
	// The examples find their redis-server as a user's program would, in
	// the environment (tests start their own).
	servertest.Main(m, func(addr string) { os.Setenv("REDIS_ADDR", addr) })
}
