package redisserver

import (
	"errors"
	"fmt"
	"github.com/fencelock/fencelock/internal/childproc"
	"net"
	"strconv"
	"sync"
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

// Cluster is a Redis Cluster of master nodes (no replicas) on 127.0.0.1,
// each a Server in its own directory, with the hash slots spread evenly.
// Its methods are safe for concurrent use.
type Cluster struct {
	nodes    []*Server
	busPorts []int // each node's cluster bus port (--cluster-port)
	logf     func(format string, args ...any)
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
// if redis-server cannot be found. Call Close when done.
func StartCluster(masters int, opts Options) (*Cluster, error) {
	if masters < 1 || masters > ClusterSlots {
		return nil, fmt.Errorf("redisserver: a cluster needs 1 to %d masters, not %d", ClusterSlots, masters)
	}
	if opts.Port < 0 || (opts.Port > 0 && opts.Port+masters-1 > 65535) {
		return nil, fmt.Errorf("redisserver: invalid first port %d for %d nodes", opts.Port, masters)
	}
	if _, err := Find(); err != nil {
		return nil, err
	}
	c := &Cluster{logf: opts.Logf}
	for i := range masters {
		node, bus, err := startClusterNode(opts, i)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("redisserver: starting cluster node %d of %d: %w", i+1, masters, err)
		}
		c.nodes = append(c.nodes, node)
		c.busPorts = append(c.busPorts, bus)
	}
	if err := c.form(); err != nil {
		c.logNodes("cluster did not form")
		c.Close()
		return nil, err
	}
	return c, nil
}

// startClusterNode starts node i of a cluster and returns it with its bus
// port. A bus port found taken is replaced by a fresh one.
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
			"--cluster-node-timeout", clusterNodeTimeout,
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

// form gives each node its slots and a distinct config epoch (as
// redis-cli --cluster create does, so that no epoch collision has to be
// resolved), introduces every node to the first one, and waits for the
// cluster to be ready.
func (c *Cluster) form() error {
	n := len(c.nodes)
	for i, s := range c.nodes {
		addr := s.Addr()
		if err := commandOK(addr, adminTimeout, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("redisserver: node %s: %w", addr, err)
		}
		lo, hi := i*ClusterSlots/n, (i+1)*ClusterSlots/n-1
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
	return c.WaitOK(clusterReadyTimeout)
}

// WaitOK polls until every node reports cluster_state:ok, knows every other
// node, and sees all 16384 slots assigned to the cluster's masters and
// served, or until timeout passes. Use it after restarting a node.
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
// from a healthy cluster.
func (c *Cluster) check() error {
	n := strconv.Itoa(len(c.nodes))
	want := [][2]string{
		{"cluster_state", "ok"},
		{"cluster_slots_assigned", strconv.Itoa(ClusterSlots)},
		{"cluster_slots_ok", strconv.Itoa(ClusterSlots)},
		{"cluster_known_nodes", n},
		{"cluster_size", n},
	}
	for _, s := range c.nodes {
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

// Nodes returns the nodes, in order: node i serves the i-th range of slots.
// The slice is a copy; the Servers are the Cluster's own (Close closes them).
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Close closes every node (see Server.Close). It is idempotent.
func (c *Cluster) Close() error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range c.nodes {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
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
