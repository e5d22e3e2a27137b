package redisserver

import (
	"errors"
	"fmt"
	"github.com/fencelock/fencelock/testing/childproc"
	"net"
	"slices"
	"strconv"
	"time"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

const (
	// clusterReadyTimeout bounds how long StartCluster waits for every node
	// to report cluster_state:ok.
	clusterReadyTimeout = 15 * time.Second
	// clusterNodeTimeout is the nodes' cluster-node-timeout, in ms.
	clusterNodeTimeout = "2000"
	// replicatedNodeTimeout is the cluster-node-timeout of a cluster with
	// replicas, in ms: a replica starts its election about that long after
	// its master stops answering, so a failover takes a few seconds.
	replicatedNodeTimeout = "1000"
	// clusterConfigFile is each node's cluster-config-file. A relative name
	// is resolved in the node's own private Dir, so the nodes do not share
	// it, and it survives Restart: a restarted node rejoins with its slots.
	clusterConfigFile = "nodes.conf"
	// busPortAttempts is how many cluster bus ports a node tries when a
	// start fails with "address already in use".
	busPortAttempts = 3
	// adminTimeout bounds one administrative command.
	adminTimeout = 2 * time.Second
)

// Cluster is a Redis Cluster on 127.0.0.1, each node a Server in its own
// directory, with the hash slots spread evenly over its shards: a master
// and, when started by StartClusterWithReplicas, its replicas. Its methods
// are safe for concurrent use.
type Cluster struct {
	nodes    []*Server
	busPorts []int // each node's cluster bus port (--cluster-port)
	// shards[i] holds the nodes of shard i, which serves the i-th range of
	// slots: its first master, then its replicas. Failovers change which
	// member is the master, not the membership (replica migration is off).
	shards [][]*Server
	logf   func(format string, args ...any)
}

// StartCluster starts masters redis-server processes in cluster mode, joins
// them with CLUSTER MEET, gives node i the i-th of masters even ranges of the
// 16384 hash slots, and waits (up to 15 s) until every node reports
// cluster_state:ok. It needs Redis 7.0 or later (--cluster-port,
// CLUSTER ADDSLOTSRANGE).
//
// opts applies to every node: Args are appended after the cluster options
// (so they may override cluster-node-timeout, 2000 ms by default), and a
// non-zero Port is the first node's port, the others following it. Each
// node's cluster bus port is picked separately. The error wraps ErrNotFound
// if redis-server cannot be found. Call Close when done. For a cluster with
// replicas, see StartClusterWithReplicas.
func StartCluster(masters int, opts Options) (*Cluster, error) {
	return startCluster(masters, 0, []string{"--cluster-node-timeout", clusterNodeTimeout}, opts)
}

// startCluster starts and forms a cluster of masters shards of 1+replicas
// nodes each; args come before opts.Args on every node.
func startCluster(masters, replicas int, args []string, opts Options) (*Cluster, error) {
	if masters < 1 || masters > ClusterSlots {
		return nil, fmt.Errorf("redisserver: a cluster needs 1 to %d masters, not %d", ClusterSlots, masters)
	}
	if replicas < 0 {
		return nil, fmt.Errorf("redisserver: invalid number of replicas per master %d", replicas)
	}
	total := masters * (1 + replicas)
	if opts.Port < 0 || (opts.Port > 0 && opts.Port+total-1 > 65535) {
		return nil, fmt.Errorf("redisserver: invalid first port %d for %d nodes", opts.Port, total)
	}
	if _, err := Find(); err != nil {
		return nil, err
	}
	c := &Cluster{logf: opts.Logf, shards: make([][]*Server, masters)}
	nodeOpts := opts
	nodeOpts.Args = append(slices.Clone(args), opts.Args...)
	for i := range total {
		node, bus, err := startClusterNode(nodeOpts, i)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("redisserver: starting cluster node %d of %d: %w", i+1, total, err)
		}
		c.nodes = append(c.nodes, node)
		c.busPorts = append(c.busPorts, bus)
		// Nodes 0..masters-1 are the masters; then each master's replicas.
		shard := i
		if i >= masters {
			shard = (i - masters) / replicas
		}
		c.shards[shard] = append(c.shards[shard], node)
	}
	if err := c.form(); err != nil {
		c.logNodes("cluster did not form")
		c.Close()
		return nil, err
	}
	return c, nil
}

// startClusterNode starts node i of a cluster and returns it with its bus
// port. A bus port found taken is replaced by a fresh one. opts.Args come
// after the cluster options.
func startClusterNode(opts Options, i int) (*Server, int, error) {
	var err error
	for range busPortAttempts {
		var bus int
		if bus, err = freePort(); err != nil {
			return nil, 0, err
		}
		o := opts
		if opts.Port != 0 {
			o.Port = opts.Port + i
		}
		o.Args = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", clusterConfigFile,
			"--cluster-port", strconv.Itoa(bus),
			// Without it a node that met no other (a one-node cluster)
			// reports its address as "" in CLUSTER SLOTS.
			"--cluster-announce-ip", "127.0.0.1",
		}, opts.Args...)
		var s *Server
		if s, err = Start(o); err == nil {
			return s, bus, nil
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return nil, 0, err
}

// form gives each node a distinct config epoch (as redis-cli --cluster
// create does, so that no epoch collision has to be resolved) and each
// shard's master its slots, introduces every node to the first one, makes
// the replicas replicate their masters, and waits for the cluster to be
// ready.
func (c *Cluster) form() error {
	for i, s := range c.nodes {
		addr := s.Addr()
		if err := commandOK(addr, adminTimeout, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("redisserver: node %s: %w", addr, err)
		}
	}
	for i, shard := range c.shards {
		addr := shard[0].Addr()
		lo, hi := c.shardSlots(i)
		if err := commandOK(addr, adminTimeout, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("redisserver: node %s: %w", addr, err)
		}
	}
	first := c.nodes[0].Addr()
	for i, s := range c.nodes[1:] {
		err := commandOK(first, adminTimeout, "CLUSTER", "MEET", "127.0.0.1",
			strconv.Itoa(s.Port()), strconv.Itoa(c.busPorts[i+1]))
		if err != nil {
			return fmt.Errorf("redisserver: node %s: CLUSTER MEET %s: %w", first, s.Addr(), err)
		}
	}
	if len(c.nodes) > len(c.shards) {
		if err := c.replicate(); err != nil {
			return err
		}
	}
	return c.WaitOK(clusterReadyTimeout)
}

// shardSlots returns the first and last slot of shard i.
func (c *Cluster) shardSlots(i int) (lo, hi int) {
	n := len(c.shards)
	return i * ClusterSlots / n, (i+1)*ClusterSlots/n - 1
}

// WaitOK polls until every node reports cluster_state:ok, knows every other
// node, and sees all 16384 slots assigned to the cluster's masters and
// served, and (in a cluster with replicas) every replica is connected to
// its shard's master and synced, or until timeout passes. Use it after
// restarting a node.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisserver: cluster not ready after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check asks every node for CLUSTER INFO and returns the first difference
// from a healthy cluster, then checks the replicas.
func (c *Cluster) check() error {
	if err := c.checkInfo(c.nodes); err != nil {
		return err
	}
	return c.checkReplicas()
}

// checkInfo asks each of nodes for CLUSTER INFO and returns the first
// difference from a healthy cluster.
func (c *Cluster) checkInfo(nodes []*Server) error {
	want := [][2]string{
		{"cluster_state", "ok"},
		{"cluster_slots_assigned", strconv.Itoa(ClusterSlots)},
		{"cluster_slots_ok", strconv.Itoa(ClusterSlots)},
		{"cluster_known_nodes", strconv.Itoa(len(c.nodes))},
		{"cluster_size", strconv.Itoa(len(c.shards))},
	}
	for _, s := range nodes {
		addr := s.Addr()
		info, err := commandString(addr, adminTimeout, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("node %s: CLUSTER INFO: %w", addr, err)
		}
		fields := infoFields(info)
		for _, kv := range want {
			if got := fields[kv[0]]; got != kv[1] {
				return fmt.Errorf("node %s reports %s:%s, want %s", addr, kv[0], got, kv[1])
			}
		}
	}
	return nil
}

// Addrs returns the nodes' addresses, "127.0.0.1:PORT", in node order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Nodes returns the nodes, in order: first the masters the cluster started
// with (node i serves the i-th range of slots, until a failover), then, in
// a cluster with replicas, the replicas of the first master, of the second,
// and so on. The slice is a copy; the Servers are the Cluster's own (Close
// closes them).
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Close closes every node (see Server.Close). It is idempotent.
func (c *Cluster) Close() error {
	return closeAll(c.nodes)
}

// logNodes passes each node's log tail to Options.Logf.
func (c *Cluster) logNodes(why string) {
	if c.logf == nil {
		return
	}
	for _, s := range c.nodes {
		c.logf("redisserver: %s; node %s log:\n%s", why, s.Addr(), childproc.Tail(s.Log(), logfTailLines))
	}
}

// clusterSlotOwners returns, for each slot, the address of the master that
// serves it according to addr's CLUSTER SLOTS ("" for an unassigned slot).
func clusterSlotOwners(addr string) ([]string, error) {
	reply, err := command(addr, adminTimeout, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	ranges, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("redisserver: CLUSTER SLOTS: unexpected reply %v", reply)
	}
	owners := make([]string, ClusterSlots)
	for _, r := range ranges {
		fields, ok := r.([]any)
		if !ok || len(fields) < 3 {
			return nil, fmt.Errorf("redisserver: CLUSTER SLOTS: unexpected range %v", r)
		}
		lo, ok1 := fields[0].(int64)
		hi, ok2 := fields[1].(int64)
		master, ok3 := fields[2].([]any)
		if !ok1 || !ok2 || !ok3 || len(master) < 2 || lo < 0 || hi >= ClusterSlots || lo > hi {
			return nil, fmt.Errorf("redisserver: CLUSTER SLOTS: unexpected range %v", r)
		}
		host, ok1 := master[0].(string)
		port, ok2 := master[1].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("redisserver: CLUSTER SLOTS: unexpected master %v", master)
		}
		if host == "" || host == "?" { // unknown: the address we asked
			host, _, _ = net.SplitHostPort(addr)
		}
		owner := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		for slot := lo; slot <= hi; slot++ {
			if owners[slot] != "" {
				return nil, fmt.Errorf("redisserver: CLUSTER SLOTS: slot %d listed twice (%s, %s)", slot, owners[slot], owner)
			}
			owners[slot] = owner
		}
	}
	return owners, nil
}

// SlotOwners returns, for each of the 16384 slots, the address of the node
// that serves it, after checking that every node reports the same owners and
// that every slot has one. It is a consistency check for tests.
func (c *Cluster) SlotOwners() ([]string, error) {
	var first []string
	for _, s := range c.nodes {
		owners, err := clusterSlotOwners(s.Addr())
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", s.Addr(), err)
		}
		for slot, o := range owners {
			if o == "" {
				return nil, fmt.Errorf("redisserver: node %s: slot %d is not served", s.Addr(), slot)
			}
			if first != nil && o != first[slot] {
				return nil, fmt.Errorf("redisserver: nodes disagree on slot %d: %s says %s, %s says %s",
					slot, c.nodes[0].Addr(), first[slot], s.Addr(), o)
			}
		}
		if first == nil {
			first = owners
		}
	}
	return first, nil
}
