package servertest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
)

// recordingTB records Skipf and Fatalf instead of acting on them (both end
// the calling goroutine, like the real ones).
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runRedis calls servertest.Redis on a recordingTB in its own goroutine.
func runRedis(t *testing.T) *recordingTB {
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		servertest.Redis(r)
		t.Error("Redis returned despite a missing binary")
	}()
	<-done
	return r
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("FENCELOCK_REDIS_SERVER", filepath.Join(t.TempDir(), "redis-server"))

	t.Setenv(servertest.EnvRequireServers, "")
	if servertest.RequireServers() {
		t.Error("RequireServers() = true with the variable empty")
	}
	r := runRedis(t)
	if r.fatal != "" || !strings.Contains(r.skipped, "redis-server") || !strings.Contains(r.skipped, redisserver.InstallHint) {
		t.Errorf("without %s: skipped %q, fatal %q; want a skip naming redis-server and %q",
			servertest.EnvRequireServers, r.skipped, r.fatal, redisserver.InstallHint)
	}

	t.Setenv(servertest.EnvRequireServers, "1")
	if !servertest.RequireServers() {
		t.Error("RequireServers() = false with the variable set to 1")
	}
	r = runRedis(t)
	if r.skipped != "" || !strings.Contains(r.fatal, "redis-server") || !strings.Contains(r.fatal, redisserver.InstallHint) {
		t.Errorf("with %s=1: skipped %q, fatal %q; want a failure naming redis-server and %q",
			servertest.EnvRequireServers, r.skipped, r.fatal, redisserver.InstallHint)
	}
}

func TestRedisClosedAtCleanup(t *testing.T) {
	var srv *redisserver.Server
	t.Run("inner", func(t *testing.T) {
		srv = servertest.Redis(t, "--databases", "4")
		if !srv.Running() {
			t.Fatal("server not running")
		}
	})
	if srv == nil {
		return // skipped
	}
	if srv.Running() {
		t.Error("server still running after the test's cleanup")
	}
	if _, err := os.Stat(srv.Dir()); !os.IsNotExist(err) {
		t.Errorf("server dir survives cleanup: %v", err)
	}
}
