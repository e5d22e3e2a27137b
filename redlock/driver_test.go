package redlock_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/driver/drivertest"
	"github.com/fencelock/fencelock/redlock"
)

// The driver contract over 5 masters: the plain lock only, with release
// notifications and job ticks. The suite counts any error as a failure, so
// each master gets 5s to answer rather than the default 250ms: on a loaded
// 2-core machine a master's reply can take longer, and an acquire with too
// few answers to decide then rightly fails with a QuorumError.
func TestDriver(t *testing.T) {
	_, clients := masters(t, 5)
	drivertest.Run(t, func(t *testing.T) driver.Store {
		b := newRedlock(t, clients, redlock.WithNodeTimeout(5*time.Second))
		t.Cleanup(func() { b.Close() })
		return b
	})
}
