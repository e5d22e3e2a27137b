package redisserver

import (
	"errors"
	"testing"
	"time"
)

// catchUpTimeout bounds a replica catching up on a few small writes, or
// reconnecting after a resume, on a loaded CI machine.
const catchUpTimeout = 15 * time.Second

// startReplicatedForTest starts a master and n replicas of it, closed at
// cleanup, with the skip/fail policy of requireRedis.
func startReplicatedForTest(t *testing.T, n int) (*Server, []*Server) {
	t.Helper()
	requireRedis(t)
	master, err := Start(Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	var replicas []*Server
	for range n {
		r, err := StartReplica(master, Options{Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		replicas = append(replicas, r)
	}
	return master, replicas
}

// mustCommand runs one command against addr and fails the test on error.
func mustCommand(t *testing.T, addr string, args ...string) any {
	t.Helper()
	reply, err := command(addr, adminTimeout, args...)
	if err != nil {
		t.Fatalf("%s: %v: %v", addr, args, err)
	}
	return reply
}

func TestStartReplica(t *testing.T) {
	t.Parallel()
	master, replicas := startReplicatedForTest(t, 2)

	mustCommand(t, master.Addr(), "SET", "k", "v")
	if err := WaitCaughtUp(catchUpTimeout, master, replicas...); err != nil {
		t.Fatal(err)
	}
	mi, err := master.Replication()
	if err != nil {
		t.Fatal(err)
	}
	if mi.Role != "master" || mi.Offset <= 0 || mi.ReplID == "" || len(mi.Replicas) != 2 {
		t.Errorf("master's replication info: %+v; want a master with 2 replicas and a positive offset", mi)
	}
	listed := map[string]bool{}
	for _, l := range mi.Replicas {
		listed[l.Addr] = l.State == "online"
	}
	for _, r := range replicas {
		if !listed[r.Addr()] {
			t.Errorf("master does not list %s as an online replica: %+v", r.Addr(), mi.Replicas)
		}
		ri, err := r.Replication()
		if err != nil {
			t.Fatal(err)
		}
		if ri.Role != "slave" || ri.MasterAddr != master.Addr() || !ri.LinkUp || ri.Offset < mi.Offset || ri.ReplID != mi.ReplID {
			t.Errorf("replica %s: %+v; want a replica of %s (replid %s) at offset %d or more", r.Addr(), ri, master.Addr(), mi.ReplID, mi.Offset)
		}
		if got := mustCommand(t, r.Addr(), "GET", "k"); got != "v" {
			t.Errorf("GET k on replica %s = %v after catching up, want v", r.Addr(), got)
		}
	}

	// A restarted replica (empty) replicates its master again.
	if err := replicas[0].Restart(); err != nil {
		t.Fatal(err)
	}
	if err := replicas[0].WaitReplicaOf(master, catchUpTimeout); err != nil {
		t.Fatal(err)
	}
	if got := mustCommand(t, replicas[0].Addr(), "GET", "k"); got != "v" {
		t.Errorf("GET k on the restarted replica = %v, want v", got)
	}
}

func TestStartReplicaInvalid(t *testing.T) {
	if _, err := StartReplica(nil, Options{}); err == nil {
		t.Error("StartReplica(nil) succeeded")
	}
	t.Setenv(EnvServerPath, t.TempDir()+"/no-such-redis-server")
	if _, err := StartReplica(&Server{}, Options{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("StartReplica error %v does not wrap ErrNotFound", err)
	}
}

// TestStallReplication: writes made while a replica is stalled are not on
// it; once resumed, it reconnects and catches up.
func TestStallReplication(t *testing.T) {
	t.Parallel()
	master, replicas := startReplicatedForTest(t, 1)
	r := replicas[0]
	mustCommand(t, master.Addr(), "SET", "before", "1")
	if err := WaitCaughtUp(catchUpTimeout, master, r); err != nil {
		t.Fatal(err)
	}
	if err := StallReplication(master, r); err != nil {
		t.Fatal(err)
	}
	if !r.Paused() {
		t.Error("stalled replica not paused")
	}
	mustCommand(t, master.Addr(), "SET", "during", "1")
	mi, err := master.Replication()
	if err != nil {
		t.Fatal(err)
	}
	if len(mi.Replicas) != 0 {
		t.Errorf("master still lists replicas while they are stalled: %+v", mi.Replicas)
	}
	if err := StallReplication(master, master); err == nil {
		t.Error("stalling a master as its own replica succeeded")
	}

	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if r.Paused() {
		t.Error("resumed replica still paused")
	}
	if err := WaitCaughtUp(catchUpTimeout, master, r); err != nil {
		t.Fatal(err)
	}
	if got := mustCommand(t, r.Addr(), "GET", "during"); got != "1" {
		t.Errorf("GET during on the resumed replica = %v, want 1", got)
	}
}

// TestStallReplicationLosesWrites is the lost write of a failover without
// Sentinel: a write made while the replica is stalled is not on it once the
// master is dead and it is promoted. Plain SIGSTOP would not lose it (the
// write waits in the socket buffers and is applied on SIGCONT), which is
// why StallReplication also closes the link; the second half checks that
// claim, so the harness notices if it stops being true.
func TestStallReplicationLosesWrites(t *testing.T) {
	t.Parallel()
	for _, cut := range []bool{true, false} {
		master, replicas := startReplicatedForTest(t, 1)
		r := replicas[0]
		mustCommand(t, master.Addr(), "SET", "before", "1")
		if err := WaitCaughtUp(catchUpTimeout, master, r); err != nil {
			t.Fatal(err)
		}
		var err error
		if cut {
			err = StallReplication(master, r)
		} else {
			err = r.Pause()
		}
		if err != nil {
			t.Fatal(err)
		}
		mustCommand(t, master.Addr(), "SET", "lock", "1")
		if err := master.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := r.Resume(); err != nil {
			t.Fatal(err)
		}
		// Once the replica has noticed that its link is gone, it has
		// applied everything it received.
		err = waitUntil("replica losing its master", catchUpTimeout, func() error {
			ri, err := r.Replication()
			if err == nil && ri.LinkUp {
				err = errors.New("link still up")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		mustCommand(t, r.Addr(), "REPLICAOF", "NO", "ONE")
		if got := mustCommand(t, r.Addr(), "GET", "before"); got != "1" {
			t.Errorf("cut %v: GET before on the promoted replica = %v, want 1", cut, got)
		}
		got := mustCommand(t, r.Addr(), "GET", "lock")
		if cut && got != nil {
			t.Errorf("StallReplication: the write made while stalled is on the promoted replica (%v)", got)
		}
		if !cut && got != "1" {
			t.Logf("plain SIGSTOP lost the write too (GET lock = %v): the kernel no longer delivers buffered data here", got)
		}
	}
}
