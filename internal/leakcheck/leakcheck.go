// Package leakcheck reports goroutines that a test binary left running.
//
// Every test package calls it from its TestMain, after m.Run (and after
// stopping anything TestMain itself started):
//
//	func TestMain(m *testing.M) {
//		os.Exit(leakcheck.Run(m))
//	}
//
// or, when TestMain has clean-up of its own to do between the tests and the
// check:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		stopSharedServers()
//		os.Exit(leakcheck.Verify(code))
//	}
//
// A goroutine still running then is almost always one a test started and
// never stopped: a go-redis client, PubSub, pgx connection or pool, HTTP
// server or client connection that was not closed, or a goroutine of the
// test's own that nothing joins. The check ignores the goroutine that calls
// it and the goroutines of the runtime and of the testing and os/signal
// packages, and gives goroutines that are on their way out time to finish
// (see Timeout) before it reports the others with their stacks.
//
// The package depends only on the standard library so that any test package
// can import it (it knows the name of internal/childproc's process-lifetime
// goroutine, but does not import the package).
package leakcheck

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Timeout is how long Check waits, in total, for goroutines to finish
// before it reports them. It is generous because a loaded CI machine (two
// cores running several test binaries) can take a while to schedule the
// last goroutines of a closed client.
const Timeout = 5 * time.Second

// Run runs the tests and then, if they passed, checks for leaked
// goroutines (see Verify). It returns the exit code for os.Exit.
func Run(m *testing.M, ignore ...string) int {
	return Verify(m.Run(), ignore...)
}

// Verify is for a TestMain that stops things of its own after m.Run: code
// is what m.Run returned. If code is 0, Verify runs Check, and if that
// finds leaked goroutines it writes them to standard error and returns 1;
// otherwise it returns code. When the tests have already failed, their
// failures are the news, and goroutines they left behind (a failed test
// often skips its clean-up) would only add noise, so there is no check.
func Verify(code int, ignore ...string) int {
	return verify(code, os.Stderr, Timeout, ignore)
}

func verify(code int, w io.Writer, timeout time.Duration, ignore []string) int {
	if code != 0 {
		return code
	}
	if err := check(timeout, ignore); err != nil {
		fmt.Fprintf(w, "FAIL: the tests passed, but they leaked goroutines.\n%v", err)
		return 1
	}
	return code
}

// Check returns an error that lists, with their stacks, the goroutines
// other than the calling one that are still running after Timeout, or nil
// if there are none. It polls with a growing interval, so that goroutines
// that are finishing (a client that was just closed, a connection being
// torn down) are not reported.
//
// Each ignore names a function as stack traces print it, for example
// "example.com/pool.(*Pool).reaper" or "net/http.(*persistConn).readLoop":
// a goroutine that has that function in its stack, or was created by it, is
// not reported. The goroutines of the runtime, of the testing package (test
// runners, the alarm), of os/signal, and internal/childproc's spawner are
// always ignored.
func Check(ignore ...string) error {
	return check(Timeout, ignore)
}

func check(timeout time.Duration, ignore []string) error {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		leaked := leakedGoroutines(ignore)
		if len(leaked) == 0 {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return &leakError{goroutines: leaked, waited: timeout}
		}
		time.Sleep(min(wait, left))
		if wait *= 2; wait > 200*time.Millisecond {
			wait = 200 * time.Millisecond
		}
	}
}

// leakedGoroutines returns the goroutines, other than the calling one, that
// are neither ignored by default nor named by ignore.
func leakedGoroutines(ignore []string) []goroutine {
	all := parseStacks(allStacks())
	var leaked []goroutine
	for i, g := range all {
		if i == 0 { // runtime.Stack puts the calling goroutine first
			continue
		}
		if !g.ignored(ignore) {
			leaked = append(leaked, g)
		}
	}
	return leaked
}

// allStacks returns the stacks of all goroutines, the calling one first.
func allStacks() string {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutine is one goroutine of a runtime.Stack dump.
type goroutine struct {
	id        string   // "18"
	state     string   // "chan receive", "select, 2 minutes"
	funcs     []string // the functions of its frames, innermost first
	createdBy string   // the function whose go statement started it; "" for the main goroutine
	stack     string   // the goroutine's part of the dump, header included
}

// parseStacks splits a runtime.Stack dump into goroutines. The dump has
// one block per goroutine, separated by blank lines:
//
//	goroutine 18 [chan receive, 2 minutes]:
//	example.com/pkg.(*T).wait(0xc000010000)
//		/src/pkg/t.go:12 +0x25
//	created by example.com/pkg.Start in goroutine 7
//		/src/pkg/t.go:10 +0x1d
func parseStacks(dump string) []goroutine {
	var gs []goroutine
	for _, block := range strings.Split(strings.TrimSpace(dump), "\n\n") {
		block = strings.TrimSpace(block)
		if !strings.HasPrefix(block, "goroutine ") {
			continue
		}
		lines := strings.Split(block, "\n")
		g := goroutine{stack: block}
		header := lines[0]
		if f := strings.Fields(header); len(f) > 1 {
			g.id = f[1]
		}
		if i, j := strings.IndexByte(header, '['), strings.LastIndexByte(header, ']'); i >= 0 && j > i {
			g.state = header[i+1 : j]
		}
		for _, line := range lines[1:] {
			if line == "" || line[0] == '\t' || line[0] == ' ' || strings.HasPrefix(line, "...") {
				continue // a file:line, or "...additional frames elided..."
			}
			if rest, ok := strings.CutPrefix(line, "created by "); ok {
				if i := strings.Index(rest, " in goroutine "); i >= 0 {
					rest = rest[:i]
				}
				g.createdBy = rest
				continue
			}
			g.funcs = append(g.funcs, funcName(line))
		}
		gs = append(gs, g)
	}
	return gs
}

// funcName returns the function of a frame line such as
// "example.com/pkg.(*T).wait(0xc000010000, {0x1, 0x2})" or
// "example.com/pkg.F[...](...)": the line without its argument list.
func funcName(frame string) string {
	if !strings.HasSuffix(frame, ")") {
		return frame
	}
	if i := strings.LastIndexByte(frame, '('); i > 0 {
		return frame[:i]
	}
	return frame
}

// ignoredFuncs are functions whose goroutines belong to the runtime, the
// testing package, os/signal or internal/childproc: a goroutine with one of
// them in its stack, or created by one, is never a leak.
var ignoredFuncs = map[string]bool{
	// The testing package: the main goroutine while tests run, the
	// goroutines that run tests, fuzz targets and examples, the alarm of
	// -test.timeout.
	"testing.Main":                  true,
	"testing.(*M).Run":              true,
	"testing.(*M).startAlarm":       true,
	"testing.(*M).startAlarm.func1": true,
	"testing.runTests":              true,
	"testing.RunTests":              true,
	"testing.(*T).Run":              true,
	"testing.tRunner":               true,
	"testing.tRunner.func1":         true,
	"testing.fRunner":               true,
	"testing.(*F).Fuzz":             true,
	"testing.runFuzzTests":          true,
	"testing.runFuzzing":            true,
	"testing.runExamples":           true,
	"testing.runExample":            true,
	"testing.runBenchmarks":         true,
	"testing.(*B).run1":             true,
	"testing.(*B).doBench":          true,
	"testing.(*B).launch":           true,
	// signal.Notify's dispatcher, and the runtime's signal handling.
	"os/signal.signal_recv":    true,
	"os/signal.loop":           true,
	"runtime.ensureSigM":       true,
	"runtime.ensureSigM.func1": true,
	// This module's own goroutines that live as long as the process by
	// design. internal/childproc forks every server from one goroutine
	// locked to its thread, so that the servers' Pdeathsig fires when the
	// process dies (childproc's tests check that this name is right).
	"github.com/fencelock/fencelock/internal/childproc.spawner": true,
	// -test.trace and -test.cpuprofile.
	"runtime.ReadTrace":           true,
	"runtime/trace.Start.func1":   true,
	"runtime/pprof.profileWriter": true,
}

// ignored reports whether g is one of the goroutines that are never leaks
// (the runtime's, ignoredFuncs', one that is exiting), or has a function of
// extra in its stack or as its creator.
func (g goroutine) ignored(extra []string) bool {
	// With GOTRACEBACK=system the dump includes the runtime's own
	// goroutines (GC workers, the sweeper, the finalizer goroutine...),
	// all started by the runtime.
	if strings.HasPrefix(g.createdBy, "runtime.") {
		return true
	}
	if g.createdBy == "" && len(g.funcs) > 0 && allPrefixed(g.funcs, "runtime.") {
		return true
	}
	// A goroutine caught in runtime.goexit1 has returned: it is on its
	// way out, whoever started it.
	if len(g.funcs) > 0 && allPrefixed(g.funcs, "runtime.goexit") {
		return true
	}
	if ignoredFuncs[g.createdBy] {
		return true
	}
	for _, f := range g.funcs {
		if ignoredFuncs[f] {
			return true
		}
	}
	for _, name := range extra {
		if name == g.createdBy {
			return true
		}
		for _, f := range g.funcs {
			if f == name {
				return true
			}
		}
	}
	return false
}

func allPrefixed(funcs []string, prefix string) bool {
	for _, f := range funcs {
		if !strings.HasPrefix(f, prefix) {
			return false
		}
	}
	return true
}

// leakError lists leaked goroutines.
type leakError struct {
	goroutines []goroutine
	waited     time.Duration
}

func (e *leakError) Error() string {
	var b strings.Builder
	n := len(e.goroutines)
	plural := "s are"
	if n == 1 {
		plural = " is"
	}
	fmt.Fprintf(&b, "leakcheck: %d goroutine%s still running after waiting %v for them to end.\n", n, plural, e.waited)
	b.WriteString("A test started each one and did not stop it: a client, server, pool or subscription\n")
	b.WriteString("left open (the \"created by\" line names the code that started it), or a goroutine\n")
	b.WriteString("of the test's own that nothing waits for.\n")
	for _, g := range e.goroutines {
		b.WriteString("\n")
		b.WriteString(g.stack)
		b.WriteString("\n")
	}
	return b.String()
}
