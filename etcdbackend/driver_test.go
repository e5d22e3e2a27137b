package etcdbackend_test

import (
	"testing"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/driver/drivertest"
	"github.com/fencelock/fencelock/etcdbackend"
)

// The driver contract against a real 3-member cluster, for every kind of
// hold.
func TestDriver(t *testing.T) {
	cli := newClient(t, sharedCluster.Endpoints()...)
	drivertest.Run(t, func(t *testing.T) driver.Store {
		b := etcdbackend.New(cli)
		t.Cleanup(func() { b.Close() })
		return b
	})
}
