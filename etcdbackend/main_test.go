package etcdbackend_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/etcdbackend/testing/etcdserver"
	"github.com/fencelock/fencelock/testing/leaktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// sharedCluster is a 3-member cluster for the tests that do not harm it,
// and for the examples (which cannot start servers of their own).
var sharedCluster *etcdserver.Cluster

func TestMain(m *testing.M) {
	c, err := etcdserver.Start(3, etcdserver.Options{})
	if err != nil {
		// Never a skip: the binary is built from the module proxy, like
		// any dependency, so a failure here is a real one.
		fmt.Fprintf(os.Stderr, "etcdbackend tests: starting a 3-member etcd cluster: %v\n", err)
		os.Exit(1)
	}
	sharedCluster = c
	// The examples read the endpoints from the environment, as a user's
	// program would.
	if err := os.Setenv("ETCD_ENDPOINTS", strings.Join(c.Endpoints(), ",")); err != nil {
		fmt.Fprintf(os.Stderr, "etcdbackend tests: %v\n", err)
		os.Exit(1)
	}
	leaktest.Main(leaktest.Then(m, func(code int) int {
		c.Close()
		return code
	}))
}

// newClient returns an etcd client of every endpoint, closed at cleanup.
func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
