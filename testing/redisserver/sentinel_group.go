package redisserver

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock/testing/childproc"
)

const (
	// Failure detection of a SentinelGroup, short so that a failover
	// completes in a few seconds: a master is subjectively down after
	// groupDownAfter ms without a valid reply; a failover that stalls is
	// abandoned after groupFailoverTimeout ms and retried after twice that.
	groupDownAfter       = 1000
	groupFailoverTimeout = 2000
	// groupReadyTimeout bounds how long StartSentinelGroup waits until the
	// sentinels know every replica and each other (they discover each other
	// through hello messages, published every 0.5 s here: about a second).
	groupReadyTimeout = 20 * time.Second
	// groupPriorityStep spaces the replica-priority of the data nodes: node
	// i has (i+1)*groupPriorityStep. Sentinel promotes the replica with the
	// lowest priority, so the promoted node is predictable.
	groupPriorityStep = 10
)

// groupSentinelDebug are the SENTINEL DEBUG settings of a SentinelGroup's
// sentinels. Sentinel asks masters and replicas for INFO every 10 s and
// publishes its hello messages (how sentinels find each other and learn a
// new master) every 2 s; it turns a restarted old master into a replica
// only after it has seen it as a master for 4 hello periods, at an INFO
// reply. Faster periods make the group ready in about a second and a
// rejoin take seconds instead of 20.
//
// The ping period matters for correctness, both ways (Redis 7.0). When a
// sentinel switches to a new master, it counts the new master as "pinged,
// no answer yet" from that moment, but it may connect to it only up to a
// ping period later (reconnection attempts, until then to the dead master,
// are spaced a ping period apart): with the default period of 1 s and
// down-after-milliseconds 1000, a sentinel sometimes judged the new master
// down before its first PONG, and a second failover followed the first.
// But a replica is only eligible for promotion if its last INFO reply is
// younger than 5 ping periods, and while the master is down replicas are
// asked every second: at 200 ms, the preferred replica was sometimes
// skipped. 400 ms leaves 600 ms for the first PONG and 1 s for a late INFO.
// Failure detection and the failover logic are Sentinel's own.
var groupSentinelDebug = []string{"info-period", "1000", "publish-period", "500", "ping-period", "400"}

// SentinelGroupOptions configures StartSentinelGroup. The zero value is the
// usual test bed: 1 master, 2 replicas, 3 sentinels, quorum 2.
type SentinelGroupOptions struct {
	// Replicas is the number of replicas started with the master; 0 means 2.
	Replicas int
	// Sentinels is the number of sentinels; 0 means 3.
	Sentinels int
	// Quorum is how many sentinels must agree that the master is down; 0
	// means a majority of Sentinels. A failover also needs the votes of a
	// majority of the sentinels, whatever the quorum.
	Quorum int
	// Args are extra redis-server arguments for the data nodes (master and
	// replicas, not the sentinels), appended after the group's own.
	Args []string
	// Logf, if set, receives server logs when something fails to start (as
	// Options.Logf).
	Logf func(format string, args ...any)
}

// SentinelGroup is a master, its replicas and the Sentinels that monitor
// them, all on 127.0.0.1: the replicated test bed for Sentinel failovers.
// Its methods are safe for concurrent use, but a test drives one failover at
// a time.
//
// The data nodes keep their order (Nodes): node 0 is the first master, and
// node i has replica-priority (i+1)*10, so Sentinel promotes the
// lowest-numbered replica that is up and in sync. The sentinels detect a
// dead master after 1 s (down-after-milliseconds 1000), with
// failover-timeout 2000 and parallel-syncs 1; a failover then takes a few
// seconds.
//
// A typical failover test:
//
//	old, _ := g.KillMaster()
//	promoted, _ := g.WaitFailover(old, 20*time.Second)
//	_ = g.Rejoin(old, 30*time.Second) // old is now a replica of promoted
//
// and a failover that loses the writes the replicas had not received:
//
//	_, _ = g.StallReplicas()
//	// ... writes to the master ...
//	old, _ := g.KillMaster()
//	_ = g.ResumeReplicas()
//	promoted, _ := g.WaitFailover(old, 20*time.Second)
type SentinelGroup struct {
	name      string
	nodes     []*Server
	sentinels []*Server
	logf      func(format string, args ...any)
}

// StartSentinelGroup starts a master, opts.Replicas replicas of it (each
// synced before the next starts) and opts.Sentinels sentinels that monitor
// the master under name, and waits (up to 20 s) until the group is ready
// (see WaitReady). The error wraps ErrNotFound if redis-server cannot be
// found. Call Close when done.
func StartSentinelGroup(name string, opts SentinelGroupOptions) (*SentinelGroup, error) {
	if opts.Replicas == 0 {
		opts.Replicas = 2
	}
	if opts.Sentinels == 0 {
		opts.Sentinels = 3
	}
	if opts.Quorum == 0 {
		opts.Quorum = opts.Sentinels/2 + 1
	}
	if opts.Replicas < 0 || opts.Sentinels < 0 || opts.Quorum < 1 || opts.Quorum > opts.Sentinels {
		return nil, fmt.Errorf("redisserver: invalid sentinel group: %d replicas, %d sentinels, quorum %d",
			opts.Replicas, opts.Sentinels, opts.Quorum)
	}
	if err := checkSentinelName(name); err != nil {
		return nil, err
	}
	if _, err := Find(); err != nil {
		return nil, err
	}
	g := &SentinelGroup{name: name, logf: opts.Logf}
	nodeOpts := func(i int) Options {
		args := append([]string{"--replica-priority", strconv.Itoa((i + 1) * groupPriorityStep)}, replicationArgs...)
		return Options{Args: append(args, opts.Args...), Logf: opts.Logf}
	}
	master, err := Start(nodeOpts(0))
	if err != nil {
		return nil, fmt.Errorf("redisserver: starting the sentinel group's master: %w", err)
	}
	g.nodes = append(g.nodes, master)
	for i := 1; i <= opts.Replicas; i++ {
		r, err := StartReplica(master, nodeOpts(i))
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("redisserver: starting the sentinel group's replica %d of %d: %w", i, opts.Replicas, err)
		}
		g.nodes = append(g.nodes, r)
	}
	cfg := sentinelConfig{
		name:            name,
		masterPort:      master.Port(),
		quorum:          opts.Quorum,
		downAfter:       groupDownAfter,
		failoverTimeout: groupFailoverTimeout,
		parallelSyncs:   1,
		debug:           groupSentinelDebug,
	}
	for i := range opts.Sentinels {
		s, err := startSentinel(cfg, Options{Logf: opts.Logf})
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("redisserver: starting the sentinel group's sentinel %d of %d: %w", i+1, opts.Sentinels, err)
		}
		g.sentinels = append(g.sentinels, s)
	}
	if err := g.WaitReady(groupReadyTimeout); err != nil {
		g.logAll("sentinel group not ready")
		g.Close()
		return nil, err
	}
	return g, nil
}

// Name returns the name the sentinels monitor the master under: the
// MasterName of a go-redis FailoverOptions.
func (g *SentinelGroup) Name() string { return g.name }

// Nodes returns the data nodes (master and replicas, whatever their role
// now) in start order: node 0 was the first master. The slice is a copy;
// the Servers are the group's own (Close closes them).
func (g *SentinelGroup) Nodes() []*Server { return slices.Clone(g.nodes) }

// Sentinels returns the sentinels. The slice is a copy; the Servers are the
// group's own. A sentinel restarted with Server.Restart keeps its config
// file but runs with Sentinel's default periods, not the group's faster
// ones (see groupSentinelDebug).
func (g *SentinelGroup) Sentinels() []*Server { return slices.Clone(g.sentinels) }

// SentinelAddrs returns the sentinels' addresses: the SentinelAddrs of a
// go-redis FailoverOptions.
func (g *SentinelGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.sentinels))
	for i, s := range g.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// MasterAddr asks the sentinels, in order, for the master's address (SENTINEL
// GET-MASTER-ADDR-BY-NAME) and returns the first answer, as a client would.
// During a failover the sentinels may briefly disagree; WaitFailover waits
// until they agree.
func (g *SentinelGroup) MasterAddr() (string, error) {
	var errs []error
	for _, s := range g.sentinels {
		if !answering(s) {
			continue
		}
		addr, err := sentinelMasterAddr(s.Addr(), g.name)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
	}
	if errs == nil {
		return "", errors.New("redisserver: no sentinel of the group is running")
	}
	return "", errors.Join(errs...)
}

// Master returns the data node the sentinels report as master (see
// MasterAddr). It may be dead: the sentinels report a killed master until
// they have failed it over.
func (g *SentinelGroup) Master() (*Server, error) {
	addr, err := g.MasterAddr()
	if err != nil {
		return nil, err
	}
	return g.node(addr)
}

// Replicas returns the running data nodes other than the master that
// Master reports, in start order.
func (g *SentinelGroup) Replicas() ([]*Server, error) {
	master, err := g.Master()
	if err != nil {
		return nil, err
	}
	var replicas []*Server
	for _, n := range g.nodes {
		if n != master && n.Running() {
			replicas = append(replicas, n)
		}
	}
	return replicas, nil
}

// KillMaster kills the current master (see Master) with SIGKILL and returns
// it, for WaitFailover and Rejoin.
func (g *SentinelGroup) KillMaster() (*Server, error) {
	master, err := g.Master()
	if err != nil {
		return nil, err
	}
	if !master.Running() {
		return nil, fmt.Errorf("redisserver: the group's master %s is not running", master.Addr())
	}
	if err := master.Kill(); err != nil {
		return nil, err
	}
	return master, nil
}

// WaitFailover polls until every running sentinel reports the same master,
// other than old, and that node answers as a master (role:master), or until
// timeout passes; it returns the new master. The other replicas may still
// be switching to it (WaitReady waits for that too).
func (g *SentinelGroup) WaitFailover(old *Server, timeout time.Duration) (*Server, error) {
	var promoted *Server
	err := waitUntil("sentinel failover away from "+old.Addr(), timeout, func() error {
		addr, err := g.agreedMasterAddr()
		if err != nil {
			return err
		}
		if addr == old.Addr() {
			return fmt.Errorf("sentinels still report %s", addr)
		}
		n, err := g.node(addr)
		if err != nil {
			return err
		}
		ri, err := n.Replication()
		if err != nil {
			return err
		}
		if ri.Role != "master" {
			return fmt.Errorf("sentinels report %s, which has role %s", addr, ri.Role)
		}
		promoted = n
		return nil
	})
	return promoted, err
}

// Rejoin restarts old, a data node that was killed, and waits until the
// sentinels have made it a replica of the current master and it has
// synced, and the group is ready again (see WaitReady), or until timeout
// passes. The restarted node is empty and runs with its original arguments:
// node 0 comes back as a master, the others as replicas of node 0's
// address. Sentinel reconfigures a node only once it has reported its
// wrong role for 4 hello periods (2 s here), so this takes 3 to 4 s.
func (g *SentinelGroup) Rejoin(old *Server, timeout time.Duration) error {
	if _, err := g.node(old.Addr()); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	if err := old.Restart(); err != nil {
		return err
	}
	return g.WaitReady(time.Until(deadline))
}

// StallReplicas makes every running replica lag behind the master from now
// on (see StallReplication: they are frozen with SIGSTOP and their
// replication links are closed), and returns them. Writes to the master
// from now on are lost if it dies before ResumeReplicas.
func (g *SentinelGroup) StallReplicas() ([]*Server, error) {
	master, err := g.Master()
	if err != nil {
		return nil, err
	}
	replicas, err := g.Replicas()
	if err != nil {
		return nil, err
	}
	if err := StallReplication(master, replicas...); err != nil {
		return nil, err
	}
	return replicas, nil
}

// ResumeReplicas resumes every paused data node (see StallReplicas). A
// resumed replica reconnects to its master within about a second and
// catches up, if the master is still there; WaitCaughtUp waits for that.
func (g *SentinelGroup) ResumeReplicas() error {
	var errs []error
	for _, n := range g.nodes {
		if n.Paused() {
			errs = append(errs, n.Resume())
		}
	}
	return errors.Join(errs...)
}

// WaitReady polls until the group is healthy, or until timeout passes:
// every running sentinel reports the same master, which answers as a
// master; every other running data node is its replica, connected and
// synced; and every running sentinel knows all the other sentinels and sees
// each running replica as up (flags "slave", link to master ok). Paused
// nodes make the group not ready. Use it after Rejoin or restarting nodes,
// before the next failover.
func (g *SentinelGroup) WaitReady(timeout time.Duration) error {
	return waitUntil("sentinel group "+g.name+" ready", timeout, g.checkReady)
}

func (g *SentinelGroup) checkReady() error {
	masterAddr, err := g.agreedMasterAddr()
	if err != nil {
		return err
	}
	master, err := g.node(masterAddr)
	if err != nil {
		return err
	}
	var replicas []string
	for _, n := range g.nodes {
		if !n.Running() {
			continue
		}
		if n.Paused() {
			return fmt.Errorf("data node %s is paused", n.Addr())
		}
		ri, err := n.Replication()
		if err != nil {
			return err
		}
		if n == master {
			if ri.Role != "master" {
				return fmt.Errorf("sentinels report %s, which has role %s", masterAddr, ri.Role)
			}
			continue
		}
		if ri.Role != "slave" || ri.MasterAddr != masterAddr || !ri.LinkUp || ri.SyncInProgress {
			return fmt.Errorf("data node %s: role %s of %s, link up %v, sync in progress %v; want a synced replica of %s",
				n.Addr(), ri.Role, ri.MasterAddr, ri.LinkUp, ri.SyncInProgress, masterAddr)
		}
		replicas = append(replicas, n.Addr())
	}
	for _, s := range g.sentinels {
		if answering(s) {
			if err := g.checkSentinelView(s.Addr(), replicas); err != nil {
				return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
			}
		}
	}
	return nil
}

// checkSentinelView checks that the sentinel at addr sees the master as up,
// knows the other sentinels, and sees each of replicas as an up replica.
func (g *SentinelGroup) checkSentinelView(addr string, replicas []string) error {
	reply, err := command(addr, adminTimeout, "SENTINEL", "MASTER", g.name)
	if err != nil {
		return err
	}
	m := pairs(reply)
	if m["flags"] != "master" {
		return fmt.Errorf("master flags %q, want \"master\"", m["flags"])
	}
	if want := strconv.Itoa(len(g.sentinels) - 1); m["num-other-sentinels"] != want {
		return fmt.Errorf("knows %s other sentinels, want %s", m["num-other-sentinels"], want)
	}
	reply, err = command(addr, adminTimeout, "SENTINEL", "REPLICAS", g.name)
	if err != nil {
		return err
	}
	list, _ := reply.([]any)
	seen := map[string]map[string]string{}
	for _, r := range list {
		kv := pairs(r)
		seen[net.JoinHostPort(kv["ip"], kv["port"])] = kv
	}
	for _, r := range replicas {
		kv, ok := seen[r]
		switch {
		case !ok:
			return fmt.Errorf("does not know replica %s", r)
		case kv["flags"] != "slave" || kv["master-link-status"] != "ok":
			return fmt.Errorf("replica %s: flags %q, master-link-status %q", r, kv["flags"], kv["master-link-status"])
		}
	}
	return nil
}

// agreedMasterAddr asks every answering sentinel for the master's address
// and returns it if they all agree.
func (g *SentinelGroup) agreedMasterAddr() (string, error) {
	agreed := ""
	for _, s := range g.sentinels {
		if !answering(s) {
			continue
		}
		addr, err := sentinelMasterAddr(s.Addr(), g.name)
		if err != nil {
			return "", err
		}
		if agreed != "" && addr != agreed {
			return "", fmt.Errorf("sentinels disagree on the master: %s and %s", agreed, addr)
		}
		agreed = addr
	}
	if agreed == "" {
		return "", errors.New("no sentinel of the group is running")
	}
	return agreed, nil
}

// node returns the data node listening on addr.
func (g *SentinelGroup) node(addr string) (*Server, error) {
	for _, n := range g.nodes {
		if n.Addr() == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("redisserver: %s is not a data node of sentinel group %s (nodes %s)", addr, g.name, addrsOf(g.nodes))
}

// Close closes the sentinels, then the data nodes (see Server.Close). It is
// idempotent.
func (g *SentinelGroup) Close() error {
	return errors.Join(closeAll(g.sentinels), closeAll(g.nodes))
}

// logAll passes every server's log tail to Logf.
func (g *SentinelGroup) logAll(why string) {
	if g.logf == nil {
		return
	}
	for _, s := range append(slices.Clone(g.nodes), g.sentinels...) {
		g.logf("redisserver: %s; %s log:\n%s", why, s.Addr(), childproc.Tail(s.Log(), logfTailLines))
	}
}

// sentinelMasterAddr asks the sentinel at addr for the address of name.
func sentinelMasterAddr(addr, name string) (string, error) {
	reply, err := command(addr, adminTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
	if err != nil {
		return "", fmt.Errorf("redisserver: sentinel %s: %w", addr, err)
	}
	hp, ok := reply.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("redisserver: sentinel %s: SENTINEL GET-MASTER-ADDR-BY-NAME %s = %v", addr, name, reply)
	}
	host, _ := hp[0].(string)
	port, _ := hp[1].(string)
	return net.JoinHostPort(host, port), nil
}

// pairs turns a flat [key value key value ...] array reply into a map.
func pairs(reply any) map[string]string {
	kv := map[string]string{}
	items, _ := reply.([]any)
	for i := 0; i+1 < len(items); i += 2 {
		k, _ := items[i].(string)
		v, _ := items[i+1].(string)
		kv[k] = v
	}
	return kv
}

// closeAll closes servers concurrently and joins their errors.
func closeAll(servers []*Server) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, s := range servers {
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
