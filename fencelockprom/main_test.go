package fencelockprom_test

import (
	"testing"

	"github.com/fencelock/fencelock/internal/servertest"
)

// exampleAddr is the address of the redis-server the example uses (tests
// start their own).
var exampleAddr string

func TestMain(m *testing.M) {
	servertest.Main(m, func(addr string) { exampleAddr = addr })
}
