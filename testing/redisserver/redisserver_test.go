package redisserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// do sends one command over a connection of its own (a go-redis client
// without retries) and returns the reply: the text of a simple string,
// integer, or bulk string; an error reply as its line ("-ERR ..."); "(nil)"
// for a nil reply. readTimeout bounds the exchange.
func do(addr string, readTimeout time.Duration, args ...string) (string, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: readTimeout, WriteTimeout: readTimeout,
	})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second+readTimeout)
	defer cancel()
	cmdArgs := make([]any, len(args))
	for i, a := range args {
		cmdArgs[i] = a
	}
	reply, err := rdb.Do(ctx, cmdArgs...).Result()
	var rerr redis.Error
	switch {
	case errors.Is(err, redis.Nil):
		return "(nil)", nil
	case errors.As(err, &rerr):
		return "-" + rerr.Error(), nil
	case err != nil:
		return "", err
	}
	return fmt.Sprint(reply), nil
}

func mustDo(t *testing.T, addr string, want string, args ...string) {
	t.Helper()
	got, err := do(addr, 2*time.Second, args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if got != want {
		t.Fatalf("%v = %q, want %q", args, got, want)
	}
}

// start is servertest.Redis for tests that need Options: same skip/fail
// policy, Close registered with t.Cleanup.
func start(t *testing.T, opts redisserver.Options) (*redisserver.Server, error) {
	t.Helper()
	srv, err := redisserver.Start(opts)
	if errors.Is(err, redisserver.ErrNotFound) {
		if servertest.RequireServers() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if srv != nil {
		t.Cleanup(func() { srv.Close() })
	}
	return srv, err
}

func TestFindHonoursEnv(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-redis-server")
	t.Setenv("FENCELOCK_REDIS_SERVER", missing)
	path, err := redisserver.Find()
	if err == nil {
		t.Fatalf("Find() = %q, want error", path)
	}
	if !errors.Is(err, redisserver.ErrNotFound) {
		t.Errorf("error %v does not wrap ErrNotFound", err)
	}
	for _, want := range []string{redisserver.InstallHint, missing, "FENCELOCK_REDIS_SERVER", "redisserver:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := redisserver.Start(redisserver.Options{}); !errors.Is(err, redisserver.ErrNotFound) {
		t.Errorf("Start with missing binary: error %v does not wrap ErrNotFound", err)
	}

	t.Setenv("FENCELOCK_REDIS_SERVER", "")
	real, err := redisserver.Find()
	if err != nil {
		if servertest.RequireServers() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	t.Setenv("FENCELOCK_REDIS_SERVER", real)
	if got, err := redisserver.Find(); err != nil || got != real {
		t.Errorf("Find() with env = %q, %v; want %q", got, err, real)
	}
}

func TestStartPing(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	if want := "127.0.0.1:" + strconv.Itoa(srv.Port()); srv.Addr() != want {
		t.Errorf("Addr() = %q, want %q", srv.Addr(), want)
	}
	if !srv.Running() {
		t.Error("Running() = false after Start")
	}
	mustDo(t, srv.Addr(), "PONG", "PING")
	if fi, err := os.Stat(srv.Dir()); err != nil || !fi.IsDir() {
		t.Errorf("Dir() %q: %v", srv.Dir(), err)
	}
	if log := srv.Log(); !strings.Contains(log, "Ready to accept connections") {
		t.Errorf("Log() lacks the ready line:\n%s", log)
	}
}

func TestExtraArgs(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t, "--maxmemory", "12345678")
	info, err := do(srv.Addr(), 2*time.Second, "INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "maxmemory:12345678") {
		t.Errorf("INFO memory lacks maxmemory:12345678:\n%s", info)
	}
}

func TestBadArgsReportLog(t *testing.T) {
	t.Parallel()
	_, err := start(t, redisserver.Options{Args: []string{"--no-such-option", "1"}})
	if err == nil {
		t.Fatal("Start with a bad option succeeded")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "exited during startup") || !strings.Contains(err.Error(), "no-such-option") {
		t.Errorf("error does not explain the failure: %v", err)
	}
}

func TestKillRestartIsEmpty(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	port := srv.Port()
	mustDo(t, srv.Addr(), "OK", "SET", "k", "v")
	mustDo(t, srv.Addr(), "v", "GET", "k")

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if srv.Running() {
		t.Fatal("Running() = true after Kill")
	}
	if _, err := do(srv.Addr(), time.Second, "PING"); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	if err := srv.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("port changed across Restart: %d -> %d", port, srv.Port())
	}
	mustDo(t, srv.Addr(), "PONG", "PING")
	mustDo(t, srv.Addr(), "(nil)", "GET", "k")
}

func TestRestartWhileRunning(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	mustDo(t, srv.Addr(), "OK", "SET", "k", "v")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	mustDo(t, srv.Addr(), "(nil)", "GET", "k")
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if !srv.Running() {
		t.Error("Running() = false while paused")
	}
	_, err := do(srv.Addr(), 300*time.Millisecond, "PING")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING while paused: err = %v, want a timeout", err)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	mustDo(t, srv.Addr(), "PONG", "PING")

	// Stop and Kill must cope with a paused server.
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop while paused: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatalf("Kill while paused: %v", err)
	}
	if err := srv.Pause(); err == nil {
		t.Error("Pause of a killed server succeeded")
	}
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	port := srv.Port()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if srv.Running() {
		t.Fatal("Running() = true after Stop")
	}
	if _, err := do(srv.Addr(), time.Second, "PING"); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
	if err := srv.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("port changed across Restart: %d -> %d", port, srv.Port())
	}
	mustDo(t, srv.Addr(), "PONG", "PING")
}

func TestCloseTwice(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if srv.Running() {
		t.Error("Running() = true after Close")
	}
	if _, err := os.Stat(srv.Dir()); !os.IsNotExist(err) {
		t.Errorf("Dir() still exists after Close: %v", err)
	}
	if _, err := do(srv.Addr(), time.Second, "PING"); err == nil {
		t.Error("PING succeeded after Close")
	}
	if err := srv.Restart(); err == nil {
		t.Error("Restart after Close succeeded")
	}
}

func TestFixedPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = start(t, redisserver.Options{Port: port})
	if err == nil {
		t.Fatal("Start on a busy port succeeded")
	}
	t.Log(err)
	if !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
		t.Errorf("error does not say the address is in use: %v", err)
	}
}

func TestFixedPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv, err := start(t, redisserver.Options{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Errorf("Port() = %d, want %d", srv.Port(), port)
	}
	mustDo(t, srv.Addr(), "PONG", "PING")
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	srv := servertest.Redis(t)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				switch i {
				case 0:
					srv.Pause()
					srv.Resume()
				case 1:
					srv.Running()
					srv.Addr()
					srv.Log()
				case 2:
					srv.Kill()
					srv.Restart()
				case 3:
					srv.Stop()
					srv.Restart()
				}
			}
		}()
	}
	wg.Wait()
	srv.Resume()
	if !srv.Running() {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	mustDo(t, srv.Addr(), "PONG", "PING")
}

// TestHelperProcess is not a real test: TestOrphanIsKilled runs the test
// binary with it to get a process that starts a server and then dies without
// running any cleanup.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("REDISSERVER_HELPER") != "1" {
		t.Skip("helper process only")
	}
	srv, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Printf("started %s %d %s\n", srv.Addr(), srv.Pid(), srv.Dir())
	select {} // wait to be killed
}

// TestOrphanIsKilled checks that a server does not outlive a test binary
// that is killed without running its cleanups (Pdeathsig, Linux only).
func TestOrphanIsKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux-only")
	}
	if _, err := redisserver.Find(); err != nil {
		servertest.Redis(t) // skips or fails with the usual message
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDISSERVER_HELPER=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "started ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q, %v", line, err)
	}
	var addr, dir string
	var pid int
	if _, err := fmt.Sscanf(line, "started %s %d %s", &addr, &pid, &dir); err != nil {
		t.Fatalf("helper: %q: %v", line, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			syscall.Kill(pid, syscall.SIGKILL) // don't leak the server
		}
		os.RemoveAll(dir) // the helper had no chance to
	})
	mustDo(t, addr, "PONG", "PING")

	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := do(addr, 200*time.Millisecond, "PING")
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server at %s still answers after its parent was killed", addr)
		}
		<-tick.C
	}
}
