// Command etcddemo is "fencelock demo --backend etcd": the demo of
// github.com/fencelock/fencelock/cmd/fencelock with the lock on a private
// 3-member etcd cluster. It is a command of its own, so that the fencelock
// command does not contain etcd's client; "fencelock demo --backend etcd",
// run from a checkout, builds and runs it. By hand, from the checkout's
// root:
//
//	go run ./cmd/etcddemo --scenario mutex,restart
//
// It takes the same flags as "fencelock demo" (--backend defaults to
// etcd here; redis and redlock work too). The etcd binary is the one the
// etcdbackend tests use: built from go.etcd.io/etcd/server/v3 on first use
// (etcdbackend/testing/etcdserver), or $FENCELOCK_ETCD.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/cmd/internal/demo"
	"github.com/fencelock/fencelock/cmd/internal/exitcode"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/testing/etcdserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit: "demo-worker" (as the demo re-executes
// this program) runs a worker; anything else is the demo's flags.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "demo-worker" {
		return demo.WorkerMain(etcdBackend)
	}
	if len(args) > 0 && args[0] == "demo" {
		args = args[1:] // "etcddemo demo --scenario ...", as "fencelock demo ..."
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("etcddemo", fmt.Errorf("cannot find this program to start workers: %w", err)))
		return exitcode.CouldNotRun
	}
	return demo.Main(args, stdout, stderr, demo.MainOptions{
		WorkerCommand:  []string{self, "demo-worker"},
		Backends:       []*demo.Backend{etcdBackend},
		DefaultBackend: demo.BackendEtcd,
	})
}

// etcdBackend is the demo's etcd Backend: the master starts a 3-member
// cluster, each worker has one etcd client and an etcdbackend.Backend.
var etcdBackend = &demo.Backend{
	Name:    demo.BackendEtcd,
	Summary: "a private 3-member etcd cluster (etcdbackend)",
	Start: func(ctx context.Context, logf func(string, ...any)) (demo.LockStore, error) {
		return startStore(logf)
	},
	NewWorker: func(raw json.RawMessage) (driver.Store, func(), error) {
		var cfg storeConfig
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, nil, fmt.Errorf("etcd configuration: %w", err)
		}
		cli, err := newClient(cfg.Endpoints)
		if err != nil {
			return nil, nil, err
		}
		b := etcdbackend.New(cli)
		return b, func() { b.Close(); cli.Close() }, nil
	},
	Adapt: demo.AdaptEtcd,
}

// storeConfig is what a worker needs: the members' client URLs.
type storeConfig struct {
	Endpoints []string `json:"endpoints"`
}

func newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(), // the restart's connection errors are expected
	})
}

// store is the running cluster, seen from the demo's master.
type store struct {
	c    *etcdserver.Cluster
	cli  *clientv3.Client // the probes'
	b    *etcdbackend.Backend
	logf func(string, ...any)

	mu    sync.Mutex
	locks map[string]*fencelock.Client // per namespace, for Inspect
}

func startStore(logf func(string, ...any)) (*store, error) {
	logf("etcd: starting a 3-member cluster (the first run builds etcd from go.etcd.io/etcd/server/v3, a minute or two)")
	c, err := etcdserver.Start(3, etcdserver.Options{Args: demo.EtcdElectionArgs})
	if err != nil {
		return nil, err
	}
	cli, err := newClient(c.Endpoints())
	if err != nil {
		c.Close()
		return nil, err
	}
	return &store{c: c, cli: cli, b: etcdbackend.New(cli), logf: logf, locks: map[string]*fencelock.Client{}}, nil
}

func (s *store) Describe() string {
	return fmt.Sprintf("a private 3-member etcd cluster (%s)", s.c.Endpoints()[0])
}

func (s *store) Config() json.RawMessage {
	raw, _ := json.Marshal(storeConfig{Endpoints: s.c.Endpoints()})
	return raw
}

// Fence asks etcd (Client.Inspect) for the lock's live hold.
func (s *store) Fence(ctx context.Context, namespace, key string) (int64, error) {
	s.mu.Lock()
	locks := s.locks[namespace]
	if locks == nil {
		locks = fencelock.New(s.b, fencelock.WithNamespace(namespace))
		s.locks[namespace] = locks
	}
	s.mu.Unlock()
	info, err := locks.Inspect(ctx, key)
	if err != nil || !info.Held {
		return 0, err
	}
	return info.Fence, nil
}

// Restart kill -9s every member and starts them again on their data: etcd
// keeps what a majority wrote, leases included, and a new leader extends
// every lease when it takes over.
func (s *store) Restart(ctx context.Context, lease time.Duration) (string, error) {
	n := len(s.c.Members())
	for i := range n {
		s.c.Kill(i)
	}
	s.logf("etcd: kill -9 all %d members", n)
	time.Sleep(250 * time.Millisecond)
	for i := range n {
		if err := s.c.Restart(i); err != nil {
			return "", err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := s.c.WaitHealthy(wctx); err != nil {
		return "", fmt.Errorf("etcd after the restart: %w", err)
	}
	return fmt.Sprintf("etcd, %d of %d members", n, n), nil
}

func (s *store) Close() error {
	s.mu.Lock()
	for _, l := range s.locks {
		l.Close()
	}
	s.mu.Unlock()
	s.b.Close()
	s.cli.Close()
	return s.c.Close()
}
