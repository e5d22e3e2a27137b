package etcdbackend_test

import (
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/testing/benchshape"
)

// BenchmarkEtcd runs the benchshape workloads on the shared 3-member
// cluster (loopback, no fsync), for the cost row of "Choosing one"
// in docs/backends.md (scripts/bench-backends.sh).
func BenchmarkEtcd(b *testing.B) {
	b.Run("members3", func(b *testing.B) {
		c := fencelock.New(etcdbackend.New(newClient(b, sharedCluster.Endpoints()...)), fencelock.WithNamespace(b.Name()))
		b.Cleanup(func() { c.Close() })
		benchshape.Run(b, c)
	})
}
