package servertest_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// failoverBound is a generous bound on a failover, for a busy 2-core CI
// machine (2-3 s when idle).
const failoverBound = 20 * time.Second

// eventually calls op until it succeeds or bound passes.
func eventually(t *testing.T, bound time.Duration, what string, op func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, bound, err)
		}
		<-tick.C
	}
}

// get reads key from the server at addr directly.
func get(t *testing.T, addr, key string) (string, error) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	return rdb.Get(context.Background(), key).Result()
}

func TestFailoverClientFollowsSentinelFailover(t *testing.T) {
	t.Parallel()
	g := servertest.RedisSentinelGroup(t)
	rdb := servertest.FailoverClient(t, g)
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := g.KillMaster()
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := g.WaitFailover(old, failoverBound)
	if err != nil {
		t.Fatal(err)
	}
	// Default options: the client finds the new master by itself.
	eventually(t, failoverBound, "SET through the failover client", func(ctx context.Context) error {
		return rdb.Set(ctx, "k", "2", 0).Err()
	})
	if v, err := get(t, promoted.Addr(), "k"); err != nil || v != "2" {
		t.Errorf("GET k on the promoted replica = %q, %v; want 2", v, err)
	}
}

func TestClusterClientAfterClusterFailover(t *testing.T) {
	t.Parallel()
	c := servertest.RedisClusterWithReplicas(t, 3)
	rdb := servertest.ClusterClient(t, c)
	ctx := context.Background()
	const key = "lock:{order-7}"
	if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := c.KillMasterOf(key)
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := c.WaitFailover(old, failoverBound)
	if err != nil {
		t.Fatal(err)
	}
	// Default options would keep dialing the dead master for up to a
	// minute; this test only needs the client on the new topology.
	rdb.ReloadState(ctx)
	eventually(t, failoverBound, "SET through the cluster client", func(ctx context.Context) error {
		return rdb.Set(ctx, key, "2", 0).Err()
	})
	if v, err := get(t, promoted.Addr(), key); err != nil || v != "2" {
		t.Errorf("GET %s on the promoted replica = %q, %v; want 2", key, v, err)
	}
}

func TestReplicatedHelpersMissingBinary(t *testing.T) {
	t.Setenv("FENCELOCK_REDIS_SERVER", t.TempDir()+"/redis-server")
	helpers := map[string]func(testing.TB){
		"RedisSentinelGroup":       func(t testing.TB) { servertest.RedisSentinelGroup(t) },
		"RedisClusterWithReplicas": func(t testing.TB) { servertest.RedisClusterWithReplicas(t, 3) },
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

func TestReplicatedHelpersClosedAtCleanup(t *testing.T) {
	t.Parallel()
	var servers []*redisserver.Server
	var rdb *redis.Client
	var crdb *redis.ClusterClient
	t.Run("inner", func(t *testing.T) {
		g := servertest.RedisSentinelGroup(t)
		rdb = servertest.FailoverClient(t, g)
		c := servertest.RedisClusterWithReplicas(t, 3)
		crdb = servertest.ClusterClient(t, c)
		servers = append(append(g.Nodes(), g.Sentinels()...), c.Nodes()...)
		if len(servers) != 12 {
			t.Fatalf("%d servers, want 3 data nodes, 3 sentinels and 6 cluster nodes", len(servers))
		}
		ctx := context.Background()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := crdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if servers == nil {
		return // skipped
	}
	for _, s := range servers {
		if s.Running() {
			t.Errorf("%s still running after the test's cleanup", s.Addr())
		}
		if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
			t.Errorf("%s dir survives cleanup: %v", s.Addr(), err)
		}
	}
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != redis.ErrClosed {
		t.Errorf("failover client Ping after cleanup: %v, want redis.ErrClosed", err)
	}
	if err := crdb.Ping(ctx).Err(); err != redis.ErrClosed {
		t.Errorf("cluster client Ping after cleanup: %v, want redis.ErrClosed", err)
	}
}
