package memorybackend_test

import (
	"testing"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/driver/drivertest"
	"github.com/fencelock/fencelock/memorybackend"
)

// The memory backend keeps the driver contract, for every kind of hold.
func TestDriver(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) driver.Store {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		return b
	})
}
