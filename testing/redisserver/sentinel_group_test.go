package redisserver

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"
)

// Generous bounds for a busy 2-core CI machine. On this one (idle or under
// stress-ng --cpu 2) a failover took 1.5-3.6 s, a Sentinel rejoin 3-4 s and
// a Cluster rejoin under 0.1 s.
const (
	failoverBound = 60 * time.Second
	rejoinBound   = 30 * time.Second
)

// startSentinelGroupForTest is StartSentinelGroup with the skip/fail policy
// of requireRedis and Close at cleanup.
func startSentinelGroupForTest(t *testing.T) *SentinelGroup {
	t.Helper()
	requireRedis(t)
	g, err := StartSentinelGroup("fencelock-test", SentinelGroupOptions{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			g.logAll("test failed")
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}

func TestSentinelGroupFailoverAndRejoin(t *testing.T) {
	t.Parallel()
	g := startSentinelGroupForTest(t)
	nodes, sentinels := g.Nodes(), g.Sentinels()
	if len(nodes) != 3 || len(sentinels) != 3 || len(g.SentinelAddrs()) != 3 || g.Name() != "fencelock-test" {
		t.Fatalf("%d nodes, %d sentinels, name %q; want 3, 3, fencelock-test", len(nodes), len(sentinels), g.Name())
	}
	for _, s := range sentinels {
		reply := mustCommand(t, s.Addr(), "SENTINEL", "MASTER", g.Name())
		if kv := pairs(reply); kv["quorum"] != "2" || kv["num-slaves"] != "2" || kv["num-other-sentinels"] != "2" {
			t.Errorf("sentinel %s: quorum %s, %s replicas, %s other sentinels; want 2, 2, 2",
				s.Addr(), kv["quorum"], kv["num-slaves"], kv["num-other-sentinels"])
		}
	}
	master, err := g.Master()
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := g.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	if master != nodes[0] || !slices.Equal(replicas, nodes[1:]) {
		t.Fatalf("master %s, replicas %s; want node 0 and nodes 1, 2 (%s)", master.Addr(), addrsOf(replicas), addrsOf(nodes))
	}

	mustCommand(t, master.Addr(), "SET", "k", "v")
	if err := WaitCaughtUp(catchUpTimeout, master, replicas...); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	old, err := g.KillMaster()
	if err != nil {
		t.Fatal(err)
	}
	if old != master || old.Running() {
		t.Fatalf("KillMaster killed %s (running %v), want %s dead", old.Addr(), old.Running(), master.Addr())
	}
	promoted, err := g.WaitFailover(old, failoverBound)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sentinel failover: %s promoted %v after kill -9 of %s", promoted.Addr(), time.Since(start).Round(time.Millisecond), old.Addr())
	// Node 1 has the lowest replica-priority of the replicas.
	if promoted != nodes[1] {
		t.Errorf("promoted %s, want node 1 %s (lowest replica-priority)", promoted.Addr(), nodes[1].Addr())
	}
	if addr, err := g.MasterAddr(); err != nil || addr != promoted.Addr() {
		t.Errorf("MasterAddr = %s, %v; want %s", addr, err, promoted.Addr())
	}
	if got := mustCommand(t, promoted.Addr(), "GET", "k"); got != "v" {
		t.Errorf("GET k on the promoted replica = %v, want v (it had caught up)", got)
	}

	start = time.Now()
	if err := g.Rejoin(old, rejoinBound); err != nil {
		t.Fatal(err)
	}
	t.Logf("sentinel rejoin: %s a replica again after %v", old.Addr(), time.Since(start).Round(time.Millisecond))
	ri, err := old.Replication()
	if err != nil {
		t.Fatal(err)
	}
	if ri.Role != "slave" || ri.MasterAddr != promoted.Addr() || !ri.LinkUp {
		t.Errorf("rejoined %s: %+v; want a replica of %s", old.Addr(), ri, promoted.Addr())
	}
	if got := mustCommand(t, old.Addr(), "GET", "k"); got != "v" {
		t.Errorf("GET k on the rejoined old master = %v, want v", got)
	}
	if m, err := g.Master(); err != nil || m != promoted {
		t.Errorf("Master after rejoin: %v, %v; want %s", m, err, promoted.Addr())
	}

	// A second failover goes back to node 0, now the replica with the
	// lowest priority.
	start = time.Now()
	old, err = g.KillMaster()
	if err != nil {
		t.Fatal(err)
	}
	promoted, err = g.WaitFailover(old, failoverBound)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sentinel failover: %s promoted %v after kill -9 of %s", promoted.Addr(), time.Since(start).Round(time.Millisecond), old.Addr())
	if promoted != nodes[0] {
		t.Errorf("second failover promoted %s, want node 0 %s", promoted.Addr(), nodes[0].Addr())
	}

	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(nodes, sentinels...) {
		if s.Running() {
			t.Errorf("%s running after Close", s.Addr())
		}
		if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
			t.Errorf("%s: dir survives Close: %v", s.Addr(), err)
		}
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestSentinelGroupLaggedFailoverLosesWrite shows how a lagged failover
// loses a lock: a write the replicas had not received when the master died
// is missing on the promoted replica, while an earlier one that they had is
// there.
func TestSentinelGroupLaggedFailoverLosesWrite(t *testing.T) {
	t.Parallel()
	g := startSentinelGroupForTest(t)
	master, err := g.Master()
	if err != nil {
		t.Fatal(err)
	}
	mustCommand(t, master.Addr(), "SET", "before", "1")
	replicas, err := g.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitCaughtUp(catchUpTimeout, master, replicas...); err != nil {
		t.Fatal(err)
	}

	stalled, err := g.StallReplicas()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stalled, replicas) {
		t.Errorf("stalled %s, want %s", addrsOf(stalled), addrsOf(replicas))
	}
	mustCommand(t, master.Addr(), "SET", "lock", "holder-1")
	start := time.Now()
	old, err := g.KillMaster()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.ResumeReplicas(); err != nil {
		t.Fatal(err)
	}
	promoted, err := g.WaitFailover(old, failoverBound)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lagged sentinel failover: %s promoted %v after kill -9 of %s", promoted.Addr(), time.Since(start).Round(time.Millisecond), old.Addr())
	if got := mustCommand(t, promoted.Addr(), "GET", "before"); got != "1" {
		t.Errorf("GET before on the promoted replica = %v, want 1", got)
	}
	if got := mustCommand(t, promoted.Addr(), "GET", "lock"); got != nil {
		t.Errorf("GET lock on the promoted replica = %v, want nil: the write made while the replicas were stalled survived", got)
	}
	// The group recovers: the other replica follows the new master.
	if err := g.WaitReady(rejoinBound); err != nil {
		t.Fatal(err)
	}
}

func TestStartSentinelGroupInvalid(t *testing.T) {
	for _, opts := range []SentinelGroupOptions{
		{Replicas: -1},
		{Sentinels: -1},
		{Sentinels: 3, Quorum: 4},
		{Quorum: -1},
	} {
		if g, err := StartSentinelGroup("m", opts); err == nil {
			g.Close()
			t.Errorf("StartSentinelGroup(%+v) succeeded", opts)
		}
	}
	if g, err := StartSentinelGroup("a b", SentinelGroupOptions{}); err == nil {
		g.Close()
		t.Error("StartSentinelGroup with an invalid name succeeded")
	}
	t.Setenv(EnvServerPath, t.TempDir()+"/no-such-redis-server")
	if _, err := StartSentinelGroup("m", SentinelGroupOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("StartSentinelGroup error %v does not wrap ErrNotFound", err)
	}
}
