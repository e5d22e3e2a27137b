package redisserver

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// StartClusterWithReplicas starts a Redis Cluster of masters shards, each a
// master and replicas replicas of it (CLUSTER REPLICATE), and waits (up to
// 15 s) until every node reports cluster_state:ok and every replica is
// synced: the replicated test bed for Cluster failovers.
//
// The nodes run with cluster-node-timeout 1000 ms, so a replica is promoted
// a few seconds after its master dies; cluster-replica-validity-factor 0, so
// a replica that lagged for a while can still be promoted; and
// cluster-allow-replica-migration no, so that a shard keeps its members
// (Shards). opts applies to every node as in StartCluster (Args come after
// these options and may override them). The error wraps ErrNotFound if
// redis-server cannot be found. Call Close when done.
//
// A typical failover test:
//
//	old, _ := c.KillMasterOf("lock:{order-7}")
//	promoted, _ := c.WaitFailover(old, 20*time.Second)
//	_ = c.Rejoin(old, 20*time.Second) // old is now a replica of promoted
//
// and one that loses the writes the replica had not received:
//
//	master, _ := c.MasterOf(key)
//	_, _ = c.StallReplicasOf(master)
//	// ... writes to key ...
//	_ = master.Kill()
//	_ = c.ResumeReplicas()
//	promoted, _ := c.WaitFailover(master, 20*time.Second)
func StartClusterWithReplicas(masters, replicas int, opts Options) (*Cluster, error) {
	args := []string{
		"--cluster-node-timeout", replicatedNodeTimeout,
		"--cluster-replica-validity-factor", "0",
		"--cluster-allow-replica-migration", "no",
	}
	return startCluster(masters, replicas, append(args, replicationArgs...), opts)
}

// replicate makes each shard's other members replicas of its first node,
// once every node has met every other.
func (c *Cluster) replicate() error {
	err := waitUntil("cluster nodes meeting", clusterReadyTimeout, func() error {
		for _, s := range c.nodes {
			info, err := commandString(s.Addr(), adminTimeout, "CLUSTER", "NODES")
			if err != nil {
				return fmt.Errorf("node %s: CLUSTER NODES: %w", s.Addr(), err)
			}
			if n := len(infoLines(info)); n != len(c.nodes) {
				return fmt.Errorf("node %s knows %d nodes, want %d", s.Addr(), n, len(c.nodes))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, shard := range c.shards {
		id, err := commandString(shard[0].Addr(), adminTimeout, "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("redisserver: node %s: CLUSTER MYID: %w", shard[0].Addr(), err)
		}
		for _, r := range shard[1:] {
			// A node in handshake is known under a temporary id, so the
			// replica may not know the master's real id yet: retry.
			err := waitUntil("CLUSTER REPLICATE on "+r.Addr(), clusterReadyTimeout, func() error {
				return commandOK(r.Addr(), adminTimeout, "CLUSTER", "REPLICATE", id)
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// infoLines returns the non-empty lines of s.
func infoLines(s string) []string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// checkReplicas checks that each shard has one master and that its other
// members are replicas of it, connected and synced.
func (c *Cluster) checkReplicas() error {
	for i, shard := range c.shards {
		if len(shard) == 1 {
			continue
		}
		roles := make([]ReplicationInfo, len(shard))
		var master *Server
		for j, s := range shard {
			ri, err := s.Replication()
			if err != nil {
				return err
			}
			roles[j] = ri
			if ri.Role == "master" {
				if master != nil {
					return fmt.Errorf("shard %d has two masters, %s and %s", i, master.Addr(), s.Addr())
				}
				master = s
			}
		}
		if master == nil {
			return fmt.Errorf("shard %d (%s) has no master", i, addrsOf(shard))
		}
		for j, s := range shard {
			ri := roles[j]
			if s != master && (ri.MasterAddr != master.Addr() || !ri.LinkUp || ri.SyncInProgress) {
				return fmt.Errorf("shard %d: %s replicates %s (link up %v, sync in progress %v), want a synced replica of %s",
					i, s.Addr(), ri.MasterAddr, ri.LinkUp, ri.SyncInProgress, master.Addr())
			}
		}
	}
	return nil
}

// Shards returns the nodes of each shard: shard i serves the i-th range of
// slots, and its first node is the master it started with. The slices are
// copies; the Servers are the Cluster's own.
func (c *Cluster) Shards() [][]*Server {
	shards := make([][]*Server, len(c.shards))
	for i, s := range c.shards {
		shards[i] = slices.Clone(s)
	}
	return shards
}

// KeySlot returns the hash slot of key (CLUSTER KEYSLOT, asked of a running
// node): only the part between the first "{" and the next "}" counts, if
// that is not empty, so keys that share a {hash tag} share a slot.
func (c *Cluster) KeySlot(key string) (int, error) {
	var errs []error
	for _, s := range c.nodes {
		if !answering(s) {
			continue
		}
		reply, err := command(s.Addr(), adminTimeout, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: CLUSTER KEYSLOT: %w", s.Addr(), err))
			continue
		}
		slot, ok := reply.(int64)
		if !ok || slot < 0 || slot >= ClusterSlots {
			return 0, fmt.Errorf("redisserver: node %s: CLUSTER KEYSLOT %q = %v", s.Addr(), key, reply)
		}
		return int(slot), nil
	}
	if errs == nil {
		return 0, errors.New("redisserver: no cluster node is running")
	}
	return 0, errors.Join(errs...)
}

// MasterOf returns the node that serves key's slot according to the running
// nodes (which must agree). Until a failover has happened, that may be a
// dead master.
func (c *Cluster) MasterOf(key string) (*Server, error) {
	slot, err := c.KeySlot(key)
	if err != nil {
		return nil, err
	}
	owners, err := c.answeringSlotOwners()
	if err != nil {
		return nil, err
	}
	return c.node(owners[slot])
}

// KillMasterOf kills the node that serves key's slot (see MasterOf) with
// SIGKILL and returns it, for WaitFailover and Rejoin.
func (c *Cluster) KillMasterOf(key string) (*Server, error) {
	master, err := c.MasterOf(key)
	if err != nil {
		return nil, err
	}
	if !master.Running() {
		return nil, fmt.Errorf("redisserver: %s, the master of %q, is not running", master.Addr(), key)
	}
	if err := master.Kill(); err != nil {
		return nil, err
	}
	return master, nil
}

// WaitFailover polls until another member of old's shard serves the shard's
// slots and answers as a master, and every running node reports
// cluster_state:ok with all 16384 slots served and agrees on who serves
// them, or until timeout passes; it returns the new master. Call it after
// killing (or pausing) old, a master.
func (c *Cluster) WaitFailover(old *Server, timeout time.Duration) (*Server, error) {
	i, err := c.shardOf(old)
	if err != nil {
		return nil, err
	}
	lo, hi := c.shardSlots(i)
	var promoted *Server
	err = waitUntil(fmt.Sprintf("cluster failover of slots %d-%d away from %s", lo, hi, old.Addr()), timeout, func() error {
		var nodes []*Server
		for _, s := range c.nodes {
			if answering(s) {
				nodes = append(nodes, s)
			}
		}
		if err := c.checkInfo(nodes); err != nil {
			return err
		}
		owners, err := c.answeringSlotOwners()
		if err != nil {
			return err
		}
		addr := owners[lo]
		for slot := lo; slot <= hi; slot++ {
			if owners[slot] != addr {
				return fmt.Errorf("slots %d-%d split between %s and %s", lo, hi, addr, owners[slot])
			}
		}
		if addr == old.Addr() {
			return fmt.Errorf("%s still serves slots %d-%d", addr, lo, hi)
		}
		n, err := c.node(addr)
		if err != nil {
			return err
		}
		if ri, err := n.Replication(); err != nil || ri.Role != "master" {
			return fmt.Errorf("%s serves slots %d-%d but has role %q (%v)", addr, lo, hi, ri.Role, err)
		}
		promoted = n
		return nil
	})
	return promoted, err
}

// Rejoin restarts old, a node that was killed (it comes back empty, with
// its cluster config file), and waits until it has rejoined the cluster as
// a replica of its shard's master and synced, and the whole cluster is
// healthy (see WaitOK), or until timeout passes. A master that was failed
// over learns from the other nodes that its slots have a new owner and
// becomes that node's replica.
func (c *Cluster) Rejoin(old *Server, timeout time.Duration) error {
	if _, err := c.shardOf(old); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	if err := old.Restart(); err != nil {
		return err
	}
	return c.WaitOK(time.Until(deadline))
}

// StallReplicasOf makes the running replicas of master lag behind it from
// now on (see StallReplication: they are frozen with SIGSTOP and their
// replication links are closed) and returns them. Writes to master's slots
// from now on are lost if master dies before ResumeReplicas. Other nodes
// see a frozen replica fail after cluster-node-timeout; that does not stop
// the cluster serving.
func (c *Cluster) StallReplicasOf(master *Server) ([]*Server, error) {
	i, err := c.shardOf(master)
	if err != nil {
		return nil, err
	}
	var replicas []*Server
	for _, s := range c.shards[i] {
		if s != master && s.Running() {
			replicas = append(replicas, s)
		}
	}
	if len(replicas) == 0 {
		return nil, fmt.Errorf("redisserver: %s has no running replica to stall", master.Addr())
	}
	if err := StallReplication(master, replicas...); err != nil {
		return nil, err
	}
	return replicas, nil
}

// ResumeReplicas resumes every paused node (see StallReplicasOf). A resumed
// replica reconnects to its master within about a second and catches up,
// if the master is still there; if not, it takes part in the failover.
func (c *Cluster) ResumeReplicas() error {
	var errs []error
	for _, s := range c.nodes {
		if s.Paused() {
			errs = append(errs, s.Resume())
		}
	}
	return errors.Join(errs...)
}

// answeringSlotOwners is SlotOwners over the nodes that are running and not
// paused.
func (c *Cluster) answeringSlotOwners() ([]string, error) {
	var first []string
	var firstAddr string
	for _, s := range c.nodes {
		if !answering(s) {
			continue
		}
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
					slot, firstAddr, first[slot], s.Addr(), o)
			}
		}
		if first == nil {
			first, firstAddr = owners, s.Addr()
		}
	}
	if first == nil {
		return nil, errors.New("redisserver: no cluster node is running")
	}
	return first, nil
}

// node returns the cluster node listening on addr.
func (c *Cluster) node(addr string) (*Server, error) {
	for _, s := range c.nodes {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redisserver: %s is not a node of the cluster (%s)", addr, addrsOf(c.nodes))
}

// shardOf returns the index of s's shard.
func (c *Cluster) shardOf(s *Server) (int, error) {
	for i, shard := range c.shards {
		if slices.Contains(shard, s) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("redisserver: %s is not a node of the cluster", s.Addr())
}
