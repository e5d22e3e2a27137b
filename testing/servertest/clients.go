package servertest

import (
	"testing"

	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/redis/go-redis/v9"
)

// FailoverOptions returns the options of a go-redis Sentinel client
// (redis.NewFailoverClient) of g's master: MasterName and SentinelAddrs
// set, everything else go-redis's default. A test may change fields before
// creating the client, e.g. MaxRetries -1 so that a command sent while the
// master is down fails at once instead of after about 1.7 s of retries.
//
// With the defaults, the client follows a failover by itself: each new
// connection asks a sentinel for the master's address, and the client
// subscribes to the sentinels' +switch-master and then closes its
// connections to the old master. On this package's group (measured on a
// 2-core machine, idle and under stress-ng --cpu 2), a command sent while
// the master is dead fails with "connect: connection refused" after its
// retries (about 1.7 s), or, if its retries outlast the outage, succeeds
// on the new master; the first command that succeeds does so within 70 ms
// of the sentinels agreeing on the new master, which g.WaitFailover waits
// for: 1.6 to 2.7 s after kill -9. While Rejoin brings the old master back
// (it is an empty master for a few seconds before the sentinels turn it
// into a replica), the client does not write to it.
func FailoverOptions(g *redisserver.SentinelGroup) *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: g.Name(), SentinelAddrs: g.SentinelAddrs()}
}

// FailoverClient returns redis.NewFailoverClient(FailoverOptions(g)) and
// registers its Close with t.Cleanup (before the group's, since cleanups
// run last-registered first).
func FailoverClient(t testing.TB, g *redisserver.SentinelGroup) *redis.Client {
	t.Helper()
	rdb := redis.NewFailoverClient(FailoverOptions(g))
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// ClusterOptions returns the options of a go-redis ClusterClient of c:
// Addrs lists every node, masters and replicas, so that the client can load
// the slot map whichever node is down; everything else is go-redis's
// default. In particular ReadOnly is false (reads and writes go to the
// master of their slot, so a test reads what it wrote) and MaxRetries is
// -1: a ClusterClient retries network errors and redirects inside its own
// loop instead (MaxRedirects, 3 retries).
//
// With the defaults, a ClusterClient does not see a failover for up to a
// minute: it refreshes its slot map only when a node answers MOVED or ASK,
// or when the map is older than ClusterStateReloadInterval (60 s), and a
// dead master answers nothing. Every command for the dead master's slots
// fails with "connect: connection refused" (it keeps dialing the dead
// node; about 0.1 s a command) until then. Measured here (idle and under
// load): the cluster had promoted the replica 2.2-2.4 s after kill -9, and
// the first command that succeeded came 60.0 s after it. Leave the options alone in a test of
// fencelock's own recovery after a failover (that is what users get). A
// test that only needs the client to be on the new topology calls
// rdb.ReloadState(ctx) after c.WaitFailover: its next commands succeed
// (measured: within 0.9 s).
func ClusterOptions(c *redisserver.Cluster) *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs()}
}

// ClusterClient returns redis.NewClusterClient(ClusterOptions(c)) and
// registers its Close with t.Cleanup (before the cluster's).
func ClusterClient(t testing.TB, c *redisserver.Cluster) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(ClusterOptions(c))
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
