package fencelockotel_test

import (
	"os"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

func TestMain(m *testing.M) {
	// The examples find their redis-server as a user's program would, in
	// the environment (tests start their own).
	servertest.Main(m, func(addr string) { os.Setenv("REDIS_ADDR", addr) })
}
