package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/fencelock/fencelock/testing/servertest"
)

// envRunMain makes the test binary run main, as the fencelock binary does
// (TestMain).
const envRunMain = "FENCELOCK_TEST_RUN_MAIN"

// runBinary runs the fencelock command with args in a process of its own
// (this test binary running main), so that what main sets up beyond run,
// and what other code writes to the process's stderr, are as users see
// them.
func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("fencelock %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// oneLine fails the test unless stderr is exactly one line that contains
// want.
func oneLine(t *testing.T, args []string, stderr, want string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") || !strings.Contains(stderr, want) {
		t.Errorf("fencelock %v: stderr %q; want one line saying %q", args, stderr, want)
	}
}

// With Redis down, a command prints its own one-line error and nothing
// else: go-redis's log lines ("pool.go:...: failed to dial"), which it
// writes to stderr itself, are silenced.
func TestRedisDownOneLine(t *testing.T) {
	addr := deadAddr(t)
	for _, args := range [][]string{
		{"ls", "--redis", addr},
		{"inspect", "k", "--redis", addr},
		{"unlock", "--yes", "--redis", addr, "k"},
	} {
		code, _, stderr := runBinary(t, args...)
		if code != exitcode.CouldNotRun {
			t.Errorf("fencelock %v: exit %d, want %d", args, code, exitcode.CouldNotRun)
		}
		oneLine(t, args, stderr, "cannot reach Redis")
	}
}

// A Redis that refuses the credentials (a wrong password, none where one
// is required) is reachable: a command says what happened, on one line,
// and exits 3, not "cannot reach Redis" and 2.
func TestRedisRefusedCredentials(t *testing.T) {
	srv := servertest.Redis(t)
	admin := servertest.RedisAdmin(t, srv)
	servertest.SetRedisUser(t, admin, "default", "resetpass", ">secret")
	for _, redisURL := range []string{"redis://:wrong@" + srv.Addr(), srv.Addr()} {
		for _, args := range [][]string{
			{"ls", "--redis", redisURL},
			{"inspect", "k", "--redis", redisURL},
			{"unlock", "--yes", "--redis", redisURL, "k"},
		} {
			code, _, stderr := runBinary(t, args...)
			if code != exitcode.Refused || strings.Contains(stderr, "cannot reach") {
				t.Errorf("fencelock %v: exit %d, stderr %q; want %d, not \"cannot reach\"", args, code, stderr, exitcode.Refused)
			}
			oneLine(t, args, stderr, "Redis refused the credentials")
		}
	}
}

// The demo, given a Redis that refuses its password, says so too.
func TestDemoRefusedCredentials(t *testing.T) {
	srv := servertest.Redis(t)
	admin := servertest.RedisAdmin(t, srv)
	servertest.SetRedisUser(t, admin, "default", "resetpass", ">secret")
	code, _, errs := runCLI("demo", "--scenario", "mutex", "--redis", "redis://:wrong@"+srv.Addr())
	if code != exitcode.CouldNotRun || !strings.Contains(errs, "refused the credentials") || strings.Contains(errs, "cannot reach") {
		t.Errorf("exit %d, stderr %q; want %d, the credentials refused", code, errs, exitcode.CouldNotRun)
	}
}
