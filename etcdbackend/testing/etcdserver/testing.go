package etcdserver

import (
	"testing"
)

// New starts a cluster of n members for the test (see Start) and registers
// its Close with t.Cleanup; if the test has failed by then, the last lines
// of every member's log are logged. When no etcd binary can be had, the
// test fails with the reason and how to fix it: it is never skipped, since
// the binary is built from the module proxy like any dependency.
func New(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := Start(n, Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("etcdserver: starting a %d-member etcd cluster: %v", n, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.Members() {
				t.Logf("etcdserver: %s log, last 30 lines:\n%s", m.Name, tail(m.Log(), 30))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("etcdserver: closing the cluster: %v", err)
		}
	})
	return c
}
