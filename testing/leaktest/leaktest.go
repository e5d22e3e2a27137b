// Package leaktest holds what every test package of fencelock's modules passes to
// go.uber.org/goleak from its TestMain:
//
//	func TestMain(m *testing.M) {
//		leaktest.Main(m)
//	}
//
// goleak does the checking: after the tests pass it retries until the
// goroutines a test started have ended, then fails the package with the
// stacks of those still running. A goroutine still running then is almost
// always one a test started and never stopped: a go-redis client, PubSub,
// pgx connection or pool, HTTP server or client connection that was not
// closed, or a goroutine of the test's own that nothing joins.
//
// What remains here is what goleak cannot know: the name of this module's
// one goroutine that lives as long as the process by design (see Options),
// how long a busy machine may take to let closed clients' goroutines end
// (see Main), and an adapter for a TestMain that must stop servers of its
// own between the tests and the check (see Then). It is shared so that the
// ignore list is in one place.
//
// It is the test harness of fencelock's own modules (the library, cmd,
// etcdbackend, fencelockprom), public so that each of them can use it; it
// is not part of the library's API, and no library package imports it.
package leaktest

import (
	"time"

	"go.uber.org/goleak"
)

// Spawner is the function of testing/childproc's goroutine. childproc
// forks every server from that one goroutine, locked to its thread, so that
// the servers' Pdeathsig fires when the process dies; it runs until the
// process exits. childproc's tests check that this name is right.
const Spawner = "github.com/fencelock/fencelock/testing/childproc.spawner"

// Options returns the goleak options of every package's check, that ignore
// this module's process-lifetime goroutine (Spawner), followed by extra.
func Options(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{goleak.IgnoreAnyFunction(Spawner)}, extra...)
}

// Settle is how long Main waits for goroutines to end before goleak's own
// check. goleak retries for under a second; a CI machine with every core
// busy can take longer than that to let a closed client's goroutines
// return, and a goroutine that outlives Settle is still a leak.
const Settle = 5 * time.Second

// Main runs m's tests and, if they pass, checks for leaked goroutines with
// goleak, ignoring what Options ignores and extra. Before the check it waits
// up to Settle for the goroutines still running to end.
func Main(m goleak.TestingM, extra ...goleak.Option) {
	opts := Options(extra...)
	goleak.VerifyTestMain(runFunc(func() int {
		code := m.Run()
		if code == 0 {
			for deadline := time.Now().Add(Settle); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if goleak.Find(opts...) == nil {
					break
				}
			}
		}
		return code
	}), opts...)
}

// Then is for a TestMain that stops things of its own after the tests (a
// shared server, a cluster): Main runs the returned TestingM's Run, which
// runs m's tests and then after, given their exit code, and checks for
// leaks only after that, if the code after returns is 0:
//
//	leaktest.Main(leaktest.Then(m, func(code int) int {
//		srv.Close()
//		return code
//	}))
func Then(m goleak.TestingM, after func(code int) int) goleak.TestingM {
	return runFunc(func() int { return after(m.Run()) })
}

type runFunc func() int

func (f runFunc) Run() int { return f() }
