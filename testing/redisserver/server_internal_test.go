package redisserver

import (
	"errors"
	"net"
	"os"
	"testing"
)

// This file cannot use servertest (import cycle), so it applies the same
// skip/fail policy by hand.
func requireRedis(t *testing.T) {
	t.Helper()
	if _, err := Find(); err != nil {
		if os.Getenv("FENCELOCK_REQUIRE_SERVERS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// TestPickedPortInUseRetries makes the first picked port a busy one and
// checks that Start moves on to another port.
func TestPickedPortInUseRetries(t *testing.T) {
	requireRedis(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port

	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls == 1 {
			return busy, nil
		}
		return freePort()
	}
	defer func() { pickPort = freePort }()

	s, err := Start(Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if calls != 2 || s.Port() == busy {
		t.Errorf("picked %d ports, ended on %d (busy %d); want a second, different port", calls, s.Port(), busy)
	}
	if err := probe(s.Addr(), s.proc); err != nil {
		t.Error(err)
	}
	if !errors.Is(launchErrForTest(t, busy), errAddrInUse) {
		t.Error("launch on a busy fixed port does not report errAddrInUse")
	}
}

func launchErrForTest(t *testing.T, port int) error {
	bin, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{bin: bin, dir: t.TempDir(), port: port}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launchOnceLocked()
}
