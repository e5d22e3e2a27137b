package etcdbackend_test

import (
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/fencelocktest"
)

// The conformance suite against a real 3-member cluster, every check with
// a Backend of its own on one client of every member.
func TestConformance(t *testing.T) {
	cli := newClient(t, sharedCluster.Endpoints()...)
	fencelocktest.Run(t, func(t *testing.T) fencelock.Backend {
		b := etcdbackend.New(cli)
		t.Cleanup(func() { b.Close() })
		return b
	})
}
