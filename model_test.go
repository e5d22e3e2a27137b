package fencelock_test

import (
	"testing"

	"github.com/fencelock/fencelock/testing/lockmodel"
	"github.com/fencelock/fencelock/testing/servertest"
)

// The model of every feature together, on the memory backend in virtual
// time: see testing/lockmodel.
func TestModelMemory(t *testing.T) {
	tg := lockmodel.Memory()
	lockmodel.Run(t, tg)
}

// The model against a real redis-server, in real time: fewer steps, and
// the tolerances of real time (see lockmodel.Target.Tolerance and the
// model's realSlack). Its checks mostly wait on leases and the network, so
// they run in parallel parts, each on a redis-server of its own.
func TestModelRedis(t *testing.T) {
	t.Parallel()
	lockmodel.RunParts(t, 5, func(t *testing.T) lockmodel.Target {
		srv := servertest.Redis(t)
		return lockmodel.Redis(t, srv.Addr())
	})
}
