package etcdbackend_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/testing/lockmodel"
)

// The model of every feature together (testing/lockmodel) on the shared
// 3-member etcd cluster, in real time: every operation but faults, a few
// hundred steps. Leases are whole seconds, as etcd grants them.
func TestModelEtcd(t *testing.T) {
	cli := newClient(t, sharedCluster.Endpoints()...)
	lockmodel.Run(t, lockmodel.Target{
		Name: "etcd",
		NewStore: func(lockmodel.TB) lockmodel.Store {
			inspector := etcdbackend.New(cli)
			return lockmodel.NewServerStore(lockmodel.ServerStore{
				NewBackend: func() driver.Store { return etcdbackend.New(cli) },
				Inspector:  inspector,
				OnClose:    func() { inspector.Close() },
			})
		},
		Features: lockmodel.Semaphores | lockmodel.RWLocks | lockmodel.Fairness | lockmodel.Inspect,
		Clients:  3,
		TTLs:     []time.Duration{2 * time.Second, 3 * time.Second, 5 * time.Second},
		Waits:    []time.Duration{0, 100 * time.Millisecond, time.Second, 3 * time.Second},
		Advances: []time.Duration{time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond},
		Job:      fencelock.Job{Period: 4 * time.Second, LockAtLeast: time.Second, LockAtMost: 2 * time.Second},
		Permits:  2,
		// A round trip to a consensus of three on a busy machine, a watch
		// event delivered late: a few seconds is many of them.
		Tolerance: 3 * time.Second,
		Checks:    10,
		Steps:     30,
	})
}
