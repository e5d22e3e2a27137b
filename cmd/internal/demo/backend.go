package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Backend is a lock store, other than the demo's own Redis, that the
// scenarios can run on ("fencelock demo --backend NAME"). The master
// starts the store's servers (Start); every worker builds its
// driver.Store from what the store says about itself (NewWorker with
// LockStore.Config). Only the lock moves: the referee (the inside counter,
// the holder key, the epoch) and the fenced store stay on the demo's own
// redis-server, as in the failover scenarios, so that the checks are the
// same for every backend.
//
// The demo knows BackendRedis and BackendRedlock itself. Other backends
// live in commands of their own, so that the fencelock command does not
// contain their clients (etcd: cmd/etcddemo, which passes its Backend to
// Main and WorkerMain).
type Backend struct {
	// Name is the --backend value.
	Name string
	// Summary is one line for the help text.
	Summary string
	// Start starts the store's servers for one run of the demo; logf
	// reports progress. The master closes the store at the end.
	Start func(ctx context.Context, logf func(format string, args ...any)) (LockStore, error)
	// NewWorker returns the driver.Store of a worker process (and of
	// the master's probes) from the store's Config, and a function that
	// closes its connections.
	NewWorker func(config json.RawMessage) (driver.Store, func(), error)
	// Adapt returns sc as it runs on this store (its leases, holds and
	// bounds in the store's units), or a reason why it does not run here.
	Adapt func(sc Scenario) (Scenario, string)
}

// LockStore is a Backend's running servers, seen from the master.
type LockStore interface {
	// Describe says what runs, for the report: "5 redis-servers as
	// independent masters (private)".
	Describe() string
	// Config is what NewWorker needs to reach the store (its addresses).
	Config() json.RawMessage
	// Fence returns the fence of the lock's live hold in namespace, or 0
	// when the lock is free.
	Fence(ctx context.Context, namespace, key string) (int64, error)
	// Restart is the restart scenario's disruption: it kill -9s some or
	// all of the store's servers, starts them again, and returns once the
	// store answers, with a few words on what it did ("2 of 5 masters
	// restarted empty"). lease is the scenario's, for stores whose rule
	// for a restart depends on it.
	Restart(ctx context.Context, lease time.Duration) (string, error)
	// Close stops the servers.
	Close() error
}

// BackendRedis names the default backend: the lock on the demo's own
// redis-server (or on the Sentinel group or Cluster of the failover
// scenarios).
const BackendRedis = "redis"

// BackendEtcd names the etcd backend, which the fencelock command does not
// contain (cmd/etcddemo does; see Main).
const BackendEtcd = "etcd"

// backendLock is lockConfig.Kind for a lock on a Backend's store.
const backendLock = "backend"

// lookupBackend finds name among the built-in backends and extra.
func lookupBackend(name string, extra []*Backend) *Backend {
	for _, b := range extra {
		if b != nil && b.Name == name {
			return b
		}
	}
	if name == BackendRedlock {
		return redlockBackend
	}
	return nil
}

// lockFence returns the fence of the scenario's lock on the server as a
// string ("" when it is free), for the controller's probes: on the demo's
// own Redis, the lock hash's field; on a Backend's store, what the store
// says.
func (r *runner) lockFence(ctx context.Context, ns string, keys demoKeys) (string, error) {
	if r.store == nil {
		v, err := r.rdb.HGet(ctx, keys.lock, "fence").Result()
		if err != nil {
			return "", err
		}
		return v, nil
	}
	f, err := r.store.Fence(ctx, ns, lockKey)
	if err != nil || f == 0 {
		return "", err
	}
	return strconv.FormatInt(f, 10), nil
}

// adapt applies the Backend's Adapt to sc; without a Backend, sc runs as
// it is.
func (c *Config) adapt(sc Scenario) (Scenario, string) {
	if c.Backend == nil || c.Backend.Adapt == nil {
		return sc, ""
	}
	return c.Backend.Adapt(sc)
}

// skipNotRedis is the reason a Redis-only scenario gives on another store.
func skipNotRedis(sc Scenario, backend string) string {
	switch {
	case sc.isFailover():
		return fmt.Sprintf("Redis only: it kill -9s the master of a replicated Redis (Sentinel or Cluster); %s has no such failover", backend)
	case sc.Fair:
		return fmt.Sprintf("not run on %s: the master checks the fair line on the lock's Redis keys (it finds each waiter by its owner token there)", backend)
	case sc.Prim != "":
		return fmt.Sprintf("not run on %s: the master watches the primitive's permits and leader on the lock's Redis keys", backend)
	}
	return ""
}
