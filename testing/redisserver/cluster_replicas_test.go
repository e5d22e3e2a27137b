package redisserver

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// startReplicatedClusterForTest is StartClusterWithReplicas (1 replica per
// master) with the skip/fail policy of requireRedis and Close at cleanup.
func startReplicatedClusterForTest(t *testing.T, masters int) *Cluster {
	t.Helper()
	requireRedis(t)
	c, err := StartClusterWithReplicas(masters, 1, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.logNodes("test failed")
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func TestStartClusterWithReplicas(t *testing.T) {
	t.Parallel()
	c := startReplicatedClusterForTest(t, 3)
	nodes, shards := c.Nodes(), c.Shards()
	if len(nodes) != 6 || len(shards) != 3 || len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes, %d shards, %d addrs; want 6, 3, 6", len(nodes), len(shards), len(c.Addrs()))
	}
	owners, err := c.SlotOwners()
	if err != nil {
		t.Fatal(err)
	}
	for i, shard := range shards {
		if len(shard) != 2 || shard[0] != nodes[i] || shard[1] != nodes[3+i] {
			t.Fatalf("shard %d = %s, want nodes %d and %d", i, addrsOf(shard), i, 3+i)
		}
		lo, hi := c.shardSlots(i)
		if owners[lo] != shard[0].Addr() || owners[hi] != shard[0].Addr() {
			t.Errorf("shard %d: slots %d-%d served by %s and %s, want its master %s", i, lo, hi, owners[lo], owners[hi], shard[0].Addr())
		}
		ri, err := shard[1].Replication()
		if err != nil {
			t.Fatal(err)
		}
		if ri.Role != "slave" || ri.MasterAddr != shard[0].Addr() || !ri.LinkUp {
			t.Errorf("shard %d replica %s: %+v; want a replica of %s", i, shard[1].Addr(), ri, shard[0].Addr())
		}
	}
	info := mustCommand(t, nodes[0].Addr(), "CLUSTER", "INFO").(string)
	if f := infoFields(info); f["cluster_known_nodes"] != "6" || f["cluster_size"] != "3" {
		t.Errorf("CLUSTER INFO: known nodes %s, size %s; want 6, 3", f["cluster_known_nodes"], f["cluster_size"])
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes {
		if s.Running() {
			t.Errorf("node %s running after Close", s.Addr())
		}
		if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
			t.Errorf("node %s: dir survives Close: %v", s.Addr(), err)
		}
	}
}

func TestClusterKeySlot(t *testing.T) {
	t.Parallel()
	c := startClusterForTest(t, 1)
	for key, want := range map[string]int{
		"foo":                  12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"user1000":             3443,
		"{}user1000":           7326, // an empty tag: the whole key counts
	} {
		got, err := c.KeySlot(key)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
	// The single master serves every key.
	if m, err := c.MasterOf("foo"); err != nil || m != c.Nodes()[0] {
		t.Errorf("MasterOf(foo) = %v, %v; want node 0", m, err)
	}
}

// TestClusterFailoverAndRejoin: killing the master of a key's slot promotes
// its replica, the slot is served again (with the key, which the replica
// had), and the old master rejoins as the new master's replica.
func TestClusterFailoverAndRejoin(t *testing.T) {
	t.Parallel()
	c := startReplicatedClusterForTest(t, 3)
	const key = "lock:{order-7}"
	master, err := c.MasterOf(key)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := c.KeySlot(key)
	if err != nil {
		t.Fatal(err)
	}
	shard := c.Shards()[slot*3/ClusterSlots]
	if master != shard[0] {
		t.Fatalf("MasterOf(%q) = %s, want %s, the master of slot %d's shard", key, master.Addr(), shard[0].Addr(), slot)
	}
	mustCommand(t, master.Addr(), "SET", key, "holder-1")
	if err := WaitCaughtUp(catchUpTimeout, master, shard[1]); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	old, err := c.KillMasterOf(key)
	if err != nil {
		t.Fatal(err)
	}
	if old != master || old.Running() {
		t.Fatalf("KillMasterOf killed %s (running %v), want %s dead", old.Addr(), old.Running(), master.Addr())
	}
	promoted, err := c.WaitFailover(old, failoverBound)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster failover: %s promoted %v after kill -9 of %s", promoted.Addr(), time.Since(start).Round(time.Millisecond), old.Addr())
	if promoted != shard[1] {
		t.Errorf("promoted %s, want the shard's replica %s", promoted.Addr(), shard[1].Addr())
	}
	if m, err := c.MasterOf(key); err != nil || m != promoted {
		t.Errorf("MasterOf after the failover = %v, %v; want %s", m, err, promoted.Addr())
	}
	// The slot is served again, by the promoted replica, with the key; the
	// other masters redirect to it.
	if got := mustCommand(t, promoted.Addr(), "GET", key); got != "holder-1" {
		t.Errorf("GET %s on the promoted replica = %v, want holder-1", key, got)
	}
	mustCommand(t, promoted.Addr(), "SET", key, "holder-2")
	for _, s := range c.Nodes() {
		if s == promoted || s == old {
			continue
		}
		_, err := command(s.Addr(), adminTimeout, "GET", key)
		var re replyError
		if !errors.As(err, &re) || !strings.HasSuffix(string(re), " "+promoted.Addr()) {
			t.Errorf("GET %s on %s: %v, want MOVED to %s", key, s.Addr(), err, promoted.Addr())
		}
	}

	start = time.Now()
	if err := c.Rejoin(old, rejoinBound); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster rejoin: %s a replica again after %v", old.Addr(), time.Since(start).Round(time.Millisecond))
	ri, err := old.Replication()
	if err != nil {
		t.Fatal(err)
	}
	if ri.Role != "slave" || ri.MasterAddr != promoted.Addr() || !ri.LinkUp {
		t.Errorf("rejoined %s: %+v; want a replica of %s", old.Addr(), ri, promoted.Addr())
	}
	if err := WaitCaughtUp(catchUpTimeout, promoted, old); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SlotOwners(); err != nil {
		t.Error(err)
	}
}

// TestClusterLaggedFailoverLosesWrite: a write the shard's replica had not
// received when its master died is missing once the replica is promoted.
func TestClusterLaggedFailoverLosesWrite(t *testing.T) {
	t.Parallel()
	c := startReplicatedClusterForTest(t, 3)
	const before, lock = "before:{order-9}", "lock:{order-9}"
	master, err := c.MasterOf(lock)
	if err != nil {
		t.Fatal(err)
	}
	mustCommand(t, master.Addr(), "SET", before, "1")
	i, _ := c.shardOf(master)
	want := c.Shards()[i][1:]
	if err := WaitCaughtUp(catchUpTimeout, master, want...); err != nil {
		t.Fatal(err)
	}
	stalled, err := c.StallReplicasOf(master)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stalled, want) {
		t.Errorf("stalled %s, want %s", addrsOf(stalled), addrsOf(want))
	}
	mustCommand(t, master.Addr(), "SET", lock, "holder-1")
	start := time.Now()
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.ResumeReplicas(); err != nil {
		t.Fatal(err)
	}
	promoted, err := c.WaitFailover(master, failoverBound)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lagged cluster failover: %s promoted %v after kill -9 of %s", promoted.Addr(), time.Since(start).Round(time.Millisecond), master.Addr())
	if got := mustCommand(t, promoted.Addr(), "GET", before); got != "1" {
		t.Errorf("GET %s on the promoted replica = %v, want 1 (written before the stall)", before, got)
	}
	if got := mustCommand(t, promoted.Addr(), "GET", lock); got != nil {
		t.Errorf("GET %s on the promoted replica = %v, want nil: the write made while the replica was stalled survived", lock, got)
	}
}

func TestStartClusterWithReplicasInvalid(t *testing.T) {
	for _, n := range [][2]int{{0, 1}, {3, -1}} {
		if c, err := StartClusterWithReplicas(n[0], n[1], Options{}); err == nil {
			c.Close()
			t.Errorf("StartClusterWithReplicas(%d, %d) succeeded", n[0], n[1])
		}
	}
	if c, err := StartClusterWithReplicas(3, 1, Options{Port: 65534}); err == nil {
		c.Close()
		t.Error("StartClusterWithReplicas with ports beyond 65535 succeeded")
	}
	t.Setenv(EnvServerPath, t.TempDir()+"/no-such-redis-server")
	if _, err := StartClusterWithReplicas(3, 1, Options{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("StartClusterWithReplicas error %v does not wrap ErrNotFound", err)
	}
}
