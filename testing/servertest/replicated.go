package servertest

import (
	"testing"

	"github.com/fencelock/fencelock/testing/redisserver"
)

// RedisSentinelGroup starts the replicated Sentinel test bed for the test:
// a master, 2 replicas and 3 sentinels (quorum 2) monitoring it under the
// name SentinelMaster, detecting a dead master after 1 s (see
// redisserver.StartSentinelGroup; args are appended to the data nodes'
// arguments), and registers its Close with t.Cleanup. If the test has
// failed by cleanup time, the last lines of every server's log are logged.
// A missing redis-server skips or fails the test as in Redis.
//
// Drive failovers with the group's methods (KillMaster, WaitFailover,
// Rejoin, StallReplicas, ResumeReplicas), and talk to it with FailoverClient.
func RedisSentinelGroup(t testing.TB, args ...string) *redisserver.SentinelGroup {
	t.Helper()
	g, err := redisserver.StartSentinelGroup(SentinelMaster, redisserver.SentinelGroupOptions{Args: args, Logf: t.Logf})
	checkStart(t, "a redis sentinel group", err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range g.Nodes() {
				logTail(t, "sentinel group data node", s)
			}
			for _, s := range g.Sentinels() {
				logTail(t, "sentinel", s)
			}
		}
		if err := g.Close(); err != nil {
			t.Errorf("servertest: closing redis sentinel group: %v", err)
		}
	})
	return g
}

// RedisClusterWithReplicas starts the replicated Cluster test bed for the
// test: masters shards of a master and one replica, with
// cluster-node-timeout 1000 ms so that a failover takes a few seconds (see
// redisserver.StartClusterWithReplicas; args are appended to every node's
// arguments), and registers its Close with t.Cleanup, logging every node's
// log tail if the test has failed. A missing redis-server skips or fails
// the test as in Redis.
//
// Drive failovers with the cluster's methods (MasterOf, KillMasterOf,
// WaitFailover, Rejoin, StallReplicasOf, ResumeReplicas), and talk to it
// with ClusterClient.
func RedisClusterWithReplicas(t testing.TB, masters int, args ...string) *redisserver.Cluster {
	t.Helper()
	c, err := redisserver.StartClusterWithReplicas(masters, 1, redisserver.Options{Args: args, Logf: t.Logf})
	checkStart(t, "a redis cluster with replicas", err)
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
