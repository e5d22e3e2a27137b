package servertest

import (
	"errors"
	"github.com/fencelock/fencelock/testing/childproc"
	"testing"

	"github.com/fencelock/fencelock/testing/redisserver"
)

// SentinelMaster is the name under which RedisSentinel's sentinel monitors
// its master: the MasterName of a go-redis FailoverOptions.
const SentinelMaster = "fencelock-master"

// RedisCluster starts a Redis Cluster of masters master nodes for the test
// (see redisserver.StartCluster; args are appended to every node's
// arguments) and registers its Close with t.Cleanup. If the test has failed
// by cleanup time, the last lines of every node's log are logged. A missing
// redis-server skips or fails the test as in Redis.
func RedisCluster(t testing.TB, masters int, args ...string) *redisserver.Cluster {
	t.Helper()
	c, err := redisserver.StartCluster(masters, redisserver.Options{Args: args, Logf: t.Logf})
	checkStart(t, "a redis cluster", err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range c.Nodes() {
				logTail(t, "cluster node", s)
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("servertest: closing redis cluster: %v", err)
		}
	})
	return c
}

// RedisSentinel starts a private redis-server (as Redis does) and a Sentinel
// that monitors it under the name SentinelMaster (see
// redisserver.StartSentinel), and registers their Close with t.Cleanup,
// logging their log tails if the test has failed. A missing redis-server
// skips or fails the test as in Redis.
func RedisSentinel(t testing.TB) (master, sentinel *redisserver.Server) {
	t.Helper()
	master = Redis(t)
	sentinel, err := redisserver.StartSentinel(master, SentinelMaster, redisserver.Options{Logf: t.Logf})
	checkStart(t, "redis sentinel", err)
	t.Cleanup(func() {
		if t.Failed() {
			logTail(t, "sentinel", sentinel)
		}
		if err := sentinel.Close(); err != nil {
			t.Errorf("servertest: closing redis sentinel: %v", err)
		}
	})
	return master, sentinel
}

// checkStart applies the policy of Redis to a start error: skip (or fail,
// when RequireServers) for a missing binary, fail for anything else.
func checkStart(t testing.TB, what string, err error) {
	t.Helper()
	if errors.Is(err, redisserver.ErrNotFound) {
		if RequireServers() {
			t.Fatalf("servertest: %v (%s=1, so this is a failure)", err, EnvRequireServers)
		}
		t.Skipf("servertest: skipping: %v (set %s=1 to fail instead)", err, EnvRequireServers)
	}
	if err != nil {
		t.Fatalf("servertest: starting %s: %v", what, err)
	}
}

func logTail(t testing.TB, what string, s *redisserver.Server) {
	t.Logf("servertest: %s %s log, last %d lines:\n%s",
		what, s.Addr(), logTailLines, childproc.Tail(s.Log(), logTailLines))
}
