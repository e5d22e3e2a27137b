package redisserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// syncTimeout bounds how long StartReplica waits for the first full sync.
// The datasets of tests are small; the bound is for a loaded CI machine.
const syncTimeout = 15 * time.Second

// ReplicationInfo is what a server's INFO replication says about its place
// in a replication topology, as far as tests need it.
type ReplicationInfo struct {
	// Role is "master" or "slave" (Redis's name for a replica).
	Role string
	// Offset is the server's replication offset in bytes: for a master
	// (master_repl_offset) how much replication stream it has produced,
	// for a replica (slave_repl_offset) how much of its master's stream it
	// has applied. Offsets of a master and of its replicas are comparable:
	// a replica whose Offset has reached its master's holds every write the
	// master had made when its Offset was read.
	Offset int64
	// ReplID is the replication ID (master_replid): the history that
	// Offset counts in. A promoted replica starts a new one.
	ReplID string
	// MasterAddr is, for a replica, the "host:port" it replicates from.
	MasterAddr string
	// LinkUp is, for a replica, master_link_status:up: it is connected to
	// its master and past the initial sync.
	LinkUp bool
	// SyncInProgress is, for a replica, master_sync_in_progress:1: a full
	// sync is being transferred.
	SyncInProgress bool
	// Replicas are, for a master, the replicas connected to it.
	Replicas []ReplicaLink
}

// ReplicaLink is a master's view of one connected replica (a slaveN line of
// INFO replication).
type ReplicaLink struct {
	// Addr is the replica's listening address, "host:port".
	Addr string
	// State is "online" once the replica is synced ("wait_bgsave" and
	// "send_bulk" before).
	State string
	// Offset is the last offset the replica acknowledged. Replicas
	// acknowledge once a second (and when asked by WAIT), so it trails the
	// replica's own Offset: read the replica's to know what it holds.
	Offset int64
	// Lag is the number of seconds since the replica's last acknowledgement.
	Lag int
}

// Replication returns the server's INFO replication. It fails if the server
// does not answer within 2 s (it is stopped, paused or gone).
func (s *Server) Replication() (ReplicationInfo, error) {
	return replicationOf(s.Addr())
}

func replicationOf(addr string) (ReplicationInfo, error) {
	f, err := info(addr, "replication")
	if err != nil {
		return ReplicationInfo{}, err
	}
	ri := ReplicationInfo{
		Role:           f["role"],
		ReplID:         f["master_replid"],
		LinkUp:         f["master_link_status"] == "up",
		SyncInProgress: f["master_sync_in_progress"] == "1",
	}
	offsetField := "master_repl_offset"
	switch ri.Role {
	case "master":
		for i := 0; ; i++ {
			line, ok := f["slave"+strconv.Itoa(i)]
			if !ok {
				break
			}
			link, err := parseReplicaLink(line)
			if err != nil {
				return ReplicationInfo{}, fmt.Errorf("redisserver: INFO replication on %s: %w", addr, err)
			}
			ri.Replicas = append(ri.Replicas, link)
		}
	case "slave":
		ri.MasterAddr = net.JoinHostPort(f["master_host"], f["master_port"])
		offsetField = "slave_repl_offset"
	default:
		return ReplicationInfo{}, fmt.Errorf("redisserver: INFO replication on %s: unexpected role %q", addr, ri.Role)
	}
	if ri.Offset, err = strconv.ParseInt(f[offsetField], 10, 64); err != nil {
		return ReplicationInfo{}, fmt.Errorf("redisserver: INFO replication on %s: bad %s %q", addr, offsetField, f[offsetField])
	}
	return ri, nil
}

// parseReplicaLink parses "ip=127.0.0.1,port=7102,state=online,offset=85,lag=0".
func parseReplicaLink(line string) (ReplicaLink, error) {
	kv := map[string]string{}
	for _, part := range strings.Split(line, ",") {
		if k, v, ok := strings.Cut(part, "="); ok {
			kv[k] = v
		}
	}
	offset, err1 := strconv.ParseInt(kv["offset"], 10, 64)
	lag, err2 := strconv.Atoi(kv["lag"])
	if kv["ip"] == "" || kv["port"] == "" || err1 != nil || err2 != nil {
		return ReplicaLink{}, fmt.Errorf("unexpected replica line %q", line)
	}
	return ReplicaLink{
		Addr:   net.JoinHostPort(kv["ip"], kv["port"]),
		State:  kv["state"],
		Offset: offset,
		Lag:    lag,
	}, nil
}

// replicationArgs are the arguments of every data node of a replicated
// topology (any of them may become a master): a master starts the full sync
// of a new replica at once, instead of waiting 5 s for more replicas to
// share a diskless transfer.
var replicationArgs = []string{"--repl-diskless-sync-delay", "0"}

// StartReplica starts a redis-server (as Start does) that replicates master
// (--replicaof), and waits until it has completed its first sync: its link
// to master is up. opts.Args are appended after --replicaof. Restart keeps
// the arguments, so a restarted replica replicates the same address again
// (whatever serves it by then). The error wraps ErrNotFound if redis-server
// cannot be found. Call Close when done.
//
// It sets repl-diskless-sync-delay to 0 on master (CONFIG SET) and on the
// replica, so that a sync starts at once rather than after Redis's default
// 5 s.
func StartReplica(master *Server, opts Options) (*Server, error) {
	if master == nil {
		return nil, errors.New("redisserver: StartReplica needs a master")
	}
	if _, err := Find(); err != nil {
		return nil, err
	}
	if err := commandOK(master.Addr(), adminTimeout, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return nil, fmt.Errorf("redisserver: StartReplica: configuring master %s: %w", master.Addr(), err)
	}
	o := opts
	o.Args = append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port())}, replicationArgs...)
	o.Args = append(o.Args, opts.Args...)
	s, err := Start(o)
	if err != nil {
		return nil, err
	}
	if err := s.WaitReplicaOf(master, syncTimeout); err != nil {
		s.logfLog("replica did not sync with its master %s", master.Addr())
		s.Close()
		return nil, err
	}
	return s, nil
}

// WaitReplicaOf polls until the server is a replica of master with its link
// up and no sync in progress, or until timeout passes. Use it after
// starting, restarting or reconfiguring a replica, before relying on it.
func (s *Server) WaitReplicaOf(master *Server, timeout time.Duration) error {
	want := master.Addr()
	return waitUntil("replica "+s.Addr()+" syncing with "+want, timeout, func() error {
		ri, err := s.Replication()
		switch {
		case err != nil:
			return err
		case ri.Role != "slave":
			return fmt.Errorf("%s has role %s", s.Addr(), ri.Role)
		case ri.MasterAddr != want:
			return fmt.Errorf("%s replicates %s", s.Addr(), ri.MasterAddr)
		case !ri.LinkUp || ri.SyncInProgress:
			return fmt.Errorf("%s: link to %s up %v, sync in progress %v", s.Addr(), want, ri.LinkUp, ri.SyncInProgress)
		}
		return nil
	})
}

// WaitCaughtUp reads master's replication offset once, then polls until
// every replica is connected to master and has applied the stream up to
// that offset, or until timeout passes: every write master had made when
// WaitCaughtUp was called is then on every replica. Use it before a
// failover that must not lose writes, or after resuming stalled replicas.
func WaitCaughtUp(timeout time.Duration, master *Server, replicas ...*Server) error {
	mi, err := master.Replication()
	if err != nil {
		return err
	}
	if mi.Role != "master" {
		return fmt.Errorf("redisserver: WaitCaughtUp: %s has role %s, not master", master.Addr(), mi.Role)
	}
	what := fmt.Sprintf("replicas %s catching up with %s to offset %d", addrsOf(replicas), master.Addr(), mi.Offset)
	return waitUntil(what, timeout, func() error {
		for _, r := range replicas {
			ri, err := r.Replication()
			switch {
			case err != nil:
				return err
			case ri.Role != "slave" || ri.MasterAddr != master.Addr() || !ri.LinkUp:
				return fmt.Errorf("%s: role %s of %s, link up %v", r.Addr(), ri.Role, ri.MasterAddr, ri.LinkUp)
			case ri.Offset < mi.Offset:
				return fmt.Errorf("%s at offset %d", r.Addr(), ri.Offset)
			}
		}
		return nil
	})
}

// StallReplication makes replicas lag behind master from now on: it freezes
// each replica with SIGSTOP (Pause) and then closes, on master, the
// replication connection of each. Writes master accepts afterwards stay on
// master alone: if master dies before the replicas are resumed, a replica
// promoted in its place does not have them (the "lost write" of a failover).
// Resume a replica (Server.Resume) and it reconnects within about a second
// and catches up from master's backlog, if master is still there.
//
// SIGSTOP alone is not enough: master keeps sending the stream into the
// frozen replica's socket, where the kernel buffers it (and, once master is
// killed, still delivers what master's own socket held), so a resumed
// replica applies the writes made while it was frozen even though master
// died. Closing the connection while the replica is frozen leaves those
// writes in master's memory only.
//
// Each replica must be connected to master. If any step fails, the replicas
// already frozen are resumed and the error says which replica failed.
func StallReplication(master *Server, replicas ...*Server) error {
	links := make([]string, len(replicas))
	for i, r := range replicas {
		ri, err := r.Replication()
		if err != nil {
			return err
		}
		if ri.Role != "slave" || ri.MasterAddr != master.Addr() || !ri.LinkUp {
			return fmt.Errorf("redisserver: stalling %s: it is not connected to %s (role %s of %s, link up %v)",
				r.Addr(), master.Addr(), ri.Role, ri.MasterAddr, ri.LinkUp)
		}
		if links[i], err = masterLinkAddr(r.Addr()); err != nil {
			return fmt.Errorf("redisserver: stalling %s: %w", r.Addr(), err)
		}
	}
	var paused []*Server
	fail := func(err error) error {
		for _, r := range paused {
			if rerr := r.Resume(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		return err
	}
	for _, r := range replicas {
		if err := r.Pause(); err != nil {
			return fail(fmt.Errorf("redisserver: stalling %s: %w", r.Addr(), err))
		}
		paused = append(paused, r)
	}
	for i, r := range replicas {
		reply, err := command(master.Addr(), adminTimeout, "CLIENT", "KILL", "ADDR", links[i], "TYPE", "replica")
		if err != nil {
			return fail(fmt.Errorf("redisserver: stalling %s: CLIENT KILL on %s: %w", r.Addr(), master.Addr(), err))
		}
		if n, _ := reply.(int64); n != 1 {
			return fail(fmt.Errorf("redisserver: stalling %s: %s has no replica connection from %s (killed %v); did the replica reconnect?",
				r.Addr(), master.Addr(), links[i], reply))
		}
	}
	return nil
}

// masterLinkAddr returns the local address of the replica's connection to
// its master (the "laddr" of its master client), which the master sees as
// the client's "addr".
func masterLinkAddr(replica string) (string, error) {
	list, err := commandString(replica, adminTimeout, "CLIENT", "LIST", "TYPE", "master")
	if err != nil {
		return "", fmt.Errorf("CLIENT LIST TYPE master: %w", err)
	}
	for _, field := range strings.Fields(list) {
		if v, ok := strings.CutPrefix(field, "laddr="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no connection to a master in CLIENT LIST: %q", list)
}
