package redlock_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/driver/drivertest"
	"github.com/fencelock/fencelock/redlock"
)

// The driver contract over 5 masters: the plain lock only, with release
// notifications and job ticks.
func TestDriver(t *testing.T) {
	_, clients := masters(t, 5)
	drivertest.Run(t, func(t *testing.T) driver.Store {
		b := newRedlock(t, clients, redlock.WithNodeTimeout(5*time.Second))
		t.Cleanup(func() { b.Close() })
		return b
	})
}
