package leakcheck

import (
	"os"
	"os/signal"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	os.Exit(Run(m))
}

// blocked starts a goroutine that blocks on a channel until the returned
// release is called, and waits for it to have started. release waits for it
// to end.
func blocked(t *testing.T) (release func()) {
	t.Helper()
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go leakyWorker(started, stop, done)
	<-started
	released := false
	release = func() {
		if !released {
			released = true
			close(stop)
			<-done
		}
	}
	t.Cleanup(release)
	return release
}

func leakyWorker(started, stop, done chan struct{}) {
	defer close(done)
	close(started)
	<-stop
}

const workerFunc = "github.com/fencelock/fencelock/internal/leakcheck.leakyWorker"

func TestReportsLeak(t *testing.T) {
	release := blocked(t)
	t0 := time.Now()
	err := check(300*time.Millisecond, nil)
	if err == nil {
		t.Fatal("check found no leak with a goroutine blocked on a channel")
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Errorf("check gave up after %v, before its timeout", d)
	}
	msg := err.Error()
	for _, want := range []string{
		"1 goroutine is still running",
		"[chan receive",
		workerFunc + "(",
		"created by " + "github.com/fencelock/fencelock/internal/leakcheck.blocked",
		"leakcheck_test.go:",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("report does not contain %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "TestReportsLeak(") || strings.Contains(msg, "testing.tRunner") {
		t.Errorf("report includes the calling goroutine or the test runner:\n%s", msg)
	}
	release()
	if err := Check(); err != nil {
		t.Errorf("after the goroutine ended: %v", err)
	}
}

func TestClean(t *testing.T) {
	t0 := time.Now()
	if err := Check(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("a clean check took %v", d)
	}
}

// TestWaitsForFinishingGoroutines: a goroutine that is about to end is not
// a leak.
func TestWaitsForFinishingGoroutines(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(200 * time.Millisecond)
	}()
	if err := Check(); err != nil {
		t.Error(err)
	}
	<-done
}

func TestIgnore(t *testing.T) {
	blocked(t)
	if err := check(50*time.Millisecond, []string{workerFunc}); err != nil {
		t.Errorf("ignoring %s: %v", workerFunc, err)
	}
	creator := "github.com/fencelock/fencelock/internal/leakcheck.blocked"
	if err := check(50*time.Millisecond, []string{creator}); err != nil {
		t.Errorf("ignoring goroutines created by %s: %v", creator, err)
	}
	if err := check(50*time.Millisecond, []string{"leakyWorker", workerFunc + ".func1"}); err == nil {
		t.Error("names that are not the function's full name ignored the goroutine")
	}
}

// TestIgnoresSignalAndCaller: signal.Notify's goroutine is not a leak, and
// neither is the goroutine that calls Check (whichever it is).
func TestIgnoresSignalAndCaller(t *testing.T) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt)
	defer signal.Stop(c)
	errc := make(chan error)
	go func() { errc <- check(50*time.Millisecond, nil) }()
	if err := <-errc; err != nil {
		t.Error(err)
	}
}

func TestVerify(t *testing.T) {
	if got := Verify(3); got != 3 {
		t.Errorf("Verify(3) = %d", got)
	}
	if got := Verify(0); got != 0 {
		t.Errorf("Verify(0) with nothing leaked = %d", got)
	}

	blocked(t)
	var out strings.Builder
	if got := verify(2, &out, 50*time.Millisecond, nil); got != 2 || out.Len() != 0 {
		t.Errorf("after failed tests: verify = %d, printed %q; want 2 and no check", got, out.String())
	}
	if got := verify(0, &out, 50*time.Millisecond, nil); got != 1 {
		t.Errorf("with a leak: verify = %d, want 1", got)
	}
	if msg := out.String(); !strings.HasPrefix(msg, "FAIL: the tests passed, but they leaked goroutines.\nleakcheck: 1 goroutine is still running") ||
		!strings.Contains(msg, workerFunc) {
		t.Errorf("with a leak, verify printed:\n%s", msg)
	}
}

// A dump as GOTRACEBACK=system prints it: the runtime's goroutines
// included, headers with gp= and m=.
const systemDump = `goroutine 1 gp=0xc000002380 m=0 mp=0x7c4f40 [running]:
main.main()
	/tmp/g.go:8 +0xdc

goroutine 2 gp=0xc000002e00 m=nil [force gc (idle)]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/proc.go:435 +0xce
runtime.goparkunlock(...)
	/usr/local/go/src/runtime/proc.go:441
runtime.forcegchelper()
	/usr/local/go/src/runtime/proc.go:348 +0xb3
runtime.goexit({})
	/usr/local/go/src/runtime/asm_amd64.s:1700 +0x1
created by runtime.init.7 in goroutine 1
	/usr/local/go/src/runtime/proc.go:336 +0x1a

goroutine 3 gp=0xc000003340 m=nil [GC sweep wait]:
runtime.gopark(0x1?, 0x0?, 0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/proc.go:435 +0xce
runtime.bgsweep(0xc000036080)
	/usr/local/go/src/runtime/mgcsweep.go:316 +0xdf
created by runtime.gcenable in goroutine 1
	/usr/local/go/src/runtime/mgc.go:204 +0x66

goroutine 7 gp=0xc0000a0000 m=nil [chan receive, 3 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/proc.go:435 +0xce
runtime.chanrecv1(0xc00001e0c0, 0x0)
	/usr/local/go/src/runtime/chan.go:506 +0x12
example.com/pkg.(*Pool[...]).reaper(0xc000010000, {0x7a2f00, 0xc00001e0c0})
	/src/pkg/pool.go:12 +0x25
example.com/pkg.NewPool[...].func1()
	/src/pkg/pool.go:10 +0x1d
...additional frames elided...
created by example.com/pkg.NewPool[...] in goroutine 6
	/src/pkg/pool.go:9 +0x1d

goroutine 9 [runnable]:
runtime.goexit1()
	/usr/local/go/src/runtime/proc.go:4475 +0xf0
runtime.goexit({})
	/usr/local/go/src/runtime/asm_amd64.s:1772 +0x6
created by sync.(*WaitGroup).Go in goroutine 6
	/usr/local/go/src/sync/waitgroup.go:238 +0x73

goroutine 8 gp=0xc0000a0380 m=nil [syscall]:
os/signal.signal_recv()
	/usr/local/go/src/runtime/sigqueue.go:152 +0x98
os/signal.loop()
	/usr/local/go/src/os/signal/signal_unix.go:23 +0x13
created by os/signal.Notify.func1.1 in goroutine 1
	/usr/local/go/src/os/signal/signal.go:152 +0x1f
`

func TestParseStacks(t *testing.T) {
	gs := parseStacks(systemDump)
	if len(gs) != 6 {
		t.Fatalf("%d goroutines, want 6", len(gs))
	}
	g := gs[3]
	if g.id != "7" || g.state != "chan receive, 3 minutes" || g.createdBy != "example.com/pkg.NewPool[...]" {
		t.Errorf("goroutine 7: id %q, state %q, created by %q", g.id, g.state, g.createdBy)
	}
	want := []string{"runtime.gopark", "runtime.chanrecv1", "example.com/pkg.(*Pool[...]).reaper", "example.com/pkg.NewPool[...].func1"}
	if strings.Join(g.funcs, " ") != strings.Join(want, " ") {
		t.Errorf("goroutine 7 frames %q, want %q", g.funcs, want)
	}
	if !strings.HasPrefix(g.stack, "goroutine 7 ") || !strings.HasSuffix(g.stack, "pool.go:9 +0x1d") {
		t.Errorf("goroutine 7 stack:\n%s", g.stack)
	}
	var kept []string
	for _, g := range gs[1:] {
		if !g.ignored(nil) {
			kept = append(kept, g.id)
		}
	}
	if strings.Join(kept, ",") != "7" {
		t.Errorf("goroutines reported: %v, want only 7", kept)
	}
	if !gs[3].ignored([]string{"example.com/pkg.(*Pool[...]).reaper"}) {
		t.Error("goroutine 7 not ignored by its function")
	}
}
