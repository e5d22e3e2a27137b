package servertest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
)

// runHelper calls start on a recordingTB in its own goroutine.
func runHelper(t *testing.T, start func(testing.TB)) *recordingTB {
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		start(r)
		t.Error("helper returned despite a missing binary")
	}()
	<-done
	return r
}

func TestClusterAndSentinelMissingBinary(t *testing.T) {
	t.Setenv("FENCELOCK_REDIS_SERVER", filepath.Join(t.TempDir(), "redis-server"))
	helpers := map[string]func(testing.TB){
		"RedisCluster":  func(t testing.TB) { servertest.RedisCluster(t, 3) },
		"RedisSentinel": func(t testing.TB) { servertest.RedisSentinel(t) },
	}
	for name, start := range helpers {
		t.Setenv(servertest.EnvRequireServers, "")
		r := runHelper(t, start)
		if r.fatal != "" || !strings.Contains(r.skipped, redisserver.InstallHint) {
			t.Errorf("%s without %s: skipped %q, fatal %q; want a skip naming %q",
				name, servertest.EnvRequireServers, r.skipped, r.fatal, redisserver.InstallHint)
		}
		t.Setenv(servertest.EnvRequireServers, "1")
		r = runHelper(t, start)
		if r.skipped != "" || !strings.Contains(r.fatal, redisserver.InstallHint) {
			t.Errorf("%s with %s=1: skipped %q, fatal %q; want a failure naming %q",
				name, servertest.EnvRequireServers, r.skipped, r.fatal, redisserver.InstallHint)
		}
	}
}

func TestRedisClusterClosedAtCleanup(t *testing.T) {
	t.Parallel()
	var nodes []*redisserver.Server
	t.Run("inner", func(t *testing.T) {
		c := servertest.RedisCluster(t, 3)
		nodes = c.Nodes()
		if len(nodes) != 3 || len(c.Addrs()) != 3 {
			t.Fatalf("%d nodes, %d addrs; want 3", len(nodes), len(c.Addrs()))
		}
		if _, err := c.SlotOwners(); err != nil {
			t.Fatal(err)
		}
	})
	for _, s := range nodes {
		if s.Running() {
			t.Errorf("node %s still running after the test's cleanup", s.Addr())
		}
		if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
			t.Errorf("node %s dir survives cleanup: %v", s.Addr(), err)
		}
	}
}

func TestRedisSentinelClosedAtCleanup(t *testing.T) {
	t.Parallel()
	var master, sentinel *redisserver.Server
	t.Run("inner", func(t *testing.T) {
		master, sentinel = servertest.RedisSentinel(t)
		if !master.Running() || !sentinel.Running() {
			t.Fatal("servers not running")
		}
		if master.Addr() == sentinel.Addr() {
			t.Fatalf("master and sentinel share %s", master.Addr())
		}
	})
	if master == nil {
		return // skipped
	}
	for _, s := range []*redisserver.Server{master, sentinel} {
		if s.Running() {
			t.Errorf("%s still running after the test's cleanup", s.Addr())
		}
		if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
			t.Errorf("%s dir survives cleanup: %v", s.Addr(), err)
		}
	}
}
