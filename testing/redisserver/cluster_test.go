package redisserver

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startClusterForTest is StartCluster with the skip/fail policy of
// requireRedis and Close at cleanup.
func startClusterForTest(t *testing.T, masters int) *Cluster {
	t.Helper()
	requireRedis(t)
	c, err := StartCluster(masters, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	const masters = 3
	c := startClusterForTest(t, masters)

	addrs, nodes := c.Addrs(), c.Nodes()
	if len(addrs) != masters || len(nodes) != masters {
		t.Fatalf("%d addrs, %d nodes; want %d", len(addrs), len(nodes), masters)
	}
	seen := map[string]bool{}
	for i, s := range nodes {
		if s.Addr() != addrs[i] || seen[addrs[i]] || !s.Running() {
			t.Errorf("node %d: Addr %s, Addrs()[i] %s, duplicate %v, running %v", i, s.Addr(), addrs[i], seen[addrs[i]], s.Running())
		}
		seen[addrs[i]] = true

		info, err := commandString(s.Addr(), time.Second, "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		f := infoFields(info)
		for k, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": "16384",
			"cluster_slots_ok":       "16384",
			"cluster_known_nodes":    "3",
			"cluster_size":           "3",
		} {
			if f[k] != want {
				t.Errorf("node %s: %s:%s, want %s", s.Addr(), k, f[k], want)
			}
		}
		if _, err := os.Stat(s.Dir() + "/" + clusterConfigFile); err != nil {
			t.Errorf("node %s: no cluster config file in its dir: %v", s.Addr(), err)
		}
	}

	// Every slot is served, all nodes agree, and node i serves the i-th
	// contiguous third.
	owners, err := c.SlotOwners()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for slot, o := range owners {
		count[o]++
		node := 0
		for node+1 < masters && (node+1)*ClusterSlots/masters <= slot {
			node++
		}
		if want := addrs[node]; o != want {
			t.Fatalf("slot %d served by %s, want %s", slot, o, want)
		}
	}
	for _, a := range addrs {
		if n := count[a]; n < ClusterSlots/masters || n > ClusterSlots/masters+1 {
			t.Errorf("node %s serves %d slots, want about %d", a, n, ClusterSlots/masters)
		}
	}

	// A key is served by its slot's node and redirected by the others.
	// "foo" hashes to slot 12182, which is the last node's.
	for i, a := range addrs {
		_, err := command(a, time.Second, "SET", "foo", "bar")
		var re replyError
		switch {
		case i == masters-1 && err != nil:
			t.Errorf("SET foo on its node %s: %v", a, err)
		case i != masters-1 && (!errors.As(err, &re) || !strings.HasPrefix(string(re), "MOVED 12182 "+addrs[masters-1])):
			t.Errorf("SET foo on node %s: %v, want MOVED 12182 %s", a, err, addrs[masters-1])
		}
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
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestClusterNodeRestartRejoins(t *testing.T) {
	t.Parallel()
	c := startClusterForTest(t, 3)
	node := c.Nodes()[1]
	if err := node.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := node.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitOK(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SlotOwners(); err != nil {
		t.Fatal(err)
	}
}

func TestStartClusterSingleMaster(t *testing.T) {
	t.Parallel()
	c := startClusterForTest(t, 1)
	owners, err := c.SlotOwners()
	if err != nil {
		t.Fatal(err)
	}
	for slot, o := range owners {
		if o != c.Addrs()[0] {
			t.Fatalf("slot %d served by %s, want %s", slot, o, c.Addrs()[0])
		}
	}
}

func TestStartClusterInvalid(t *testing.T) {
	for _, n := range []int{0, -1, ClusterSlots + 1} {
		if c, err := StartCluster(n, Options{}); err == nil {
			c.Close()
			t.Errorf("StartCluster(%d) succeeded", n)
		}
	}
	if c, err := StartCluster(3, Options{Port: 65534}); err == nil {
		c.Close()
		t.Error("StartCluster with ports beyond 65535 succeeded")
	}
}

func TestStartClusterMissingBinary(t *testing.T) {
	t.Setenv(EnvServerPath, t.TempDir()+"/no-such-redis-server")
	if _, err := StartCluster(3, Options{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("StartCluster error %v does not wrap ErrNotFound", err)
	}
	if _, err := StartSentinel(&Server{}, "m", Options{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("StartSentinel error %v does not wrap ErrNotFound", err)
	}
}

func TestStartSentinel(t *testing.T) {
	t.Parallel()
	requireRedis(t)
	master, err := Start(Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	s, err := StartSentinel(master, "my-master", Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	reply, err := command(s.Addr(), time.Second, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "my-master")
	if err != nil {
		t.Fatal(err)
	}
	if hp, ok := reply.([]any); !ok || len(hp) != 2 || hp[0] != "127.0.0.1" || hp[1] != strconv.Itoa(master.Port()) {
		t.Errorf("get-master-addr-by-name = %v, want [127.0.0.1 %d]", reply, master.Port())
	}
	info, err := commandString(s.Addr(), time.Second, "INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	if f := infoFields(info); f["redis_mode"] != "sentinel" {
		t.Errorf("redis_mode:%s, want sentinel", f["redis_mode"])
	}
	// Sentinel has rewritten its config file (with its id).
	conf, err := os.ReadFile(s.Dir() + "/" + sentinelConfName)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "sentinel myid ") || !strings.Contains(string(conf), "sentinel monitor my-master 127.0.0.1 "+strconv.Itoa(master.Port())+" 1") {
		t.Errorf("config file not as expected:\n%s", conf)
	}

	// The sentinel is a Server like any other: it restarts on its port with
	// its config, and closes.
	port := s.Port()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port {
		t.Errorf("port changed across Restart: %d -> %d", port, s.Port())
	}
	if err := waitSentinel(s.Addr(), "my-master", master.Addr(), 10*time.Second); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Errorf("dir survives Close: %v", err)
	}
}

func TestStartSentinelInvalid(t *testing.T) {
	for _, name := range []string{"", "a b", "a\nsentinel", `a"`} {
		if s, err := StartSentinel(&Server{}, name, Options{}); err == nil {
			s.Close()
			t.Errorf("StartSentinel(%q) succeeded", name)
		}
	}
	if _, err := StartSentinel(nil, "m", Options{}); err == nil {
		t.Error("StartSentinel(nil) succeeded")
	}
}

func TestShellQuote(t *testing.T) {
	if got, want := shellQuote(`/a b/it's`), `'/a b/it'\''s'`; got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}
