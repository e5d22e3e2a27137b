package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redlock"
	"github.com/fencelock/fencelock/testing/redisserver"
	"github.com/redis/go-redis/v9"
)

// BackendRedlock names the Redlock backend: the lock on a majority of
// independent redis-servers that the demo starts (package redlock).
const BackendRedlock = "redlock"

// DefaultRedlockMasters is how many masters "--backend redlock" starts
// unless told otherwise.
const DefaultRedlockMasters = 5

// redlockBackend is the Redlock Backend as a worker knows it: it needs only
// the addresses in the store's Config.
var redlockBackend = RedlockBackend(DefaultRedlockMasters)

// RedlockBackend returns the Backend "--backend redlock": masters (3 or 5)
// private redis-servers without persistence, independent of one another,
// and a redlock.Backend over them in every worker.
func RedlockBackend(masters int) *Backend {
	return &Backend{
		Name:    BackendRedlock,
		Summary: fmt.Sprintf("a majority of %d independent redis-servers (package redlock)", masters),
		Start: func(ctx context.Context, logf func(string, ...any)) (LockStore, error) {
			return startRedlockStore(masters, logf)
		},
		NewWorker: newRedlockWorker,
		Adapt:     adaptRedlock,
	}
}

// adaptRedlock: the lease scenarios run as on one Redis (Redlock's leases
// are in milliseconds too); restart kill -9s a minority of the masters.
func adaptRedlock(sc Scenario) (Scenario, string) {
	switch {
	case sc.Fair:
		return sc, "redlock has no fair line (no driver.Lines): WithFairness fails with ErrUnsupported"
	case sc.Prim == primSemaphore, sc.Prim == primRWLock:
		return sc, "redlock keeps no semaphores or read-write locks (driver.Store.Supports): the call fails with ErrUnsupported"
	}
	if why := skipNotRedis(sc, "redlock"); why != "" {
		return sc, why
	}
	// A renewal sent just before a holder was paused or killed can reach a
	// master up to the node timeout later, and its lease there runs from
	// then: the lock is free on a majority that much later.
	sc.ExpirySlack = redlock.DefaultNodeTimeout
	if sc.Restart {
		// The referee is not restarted: the fenced store can stay on it.
		sc.SQLStore = false
		sc.RestartSafe = true
		sc.Summary = "a minority of the masters kill -9ed, down longer than the lease, restarted empty: never two holders, fences keep increasing; a lock the killed masters held with a bare majority is lost (and its holder told)"
	}
	return sc, ""
}

// redlockConfig is a worker's view of the masters.
type redlockConfig struct {
	Addrs []string `json:"addrs"`
}

// redlockClient returns a go-redis client for one master, as the redlock
// package asks: requests bounded by their context, no retries, a short
// dial, so that a master that is down costs a refused dial.
func redlockClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, DialerRetries: 1, DialerRetryTimeout: time.Millisecond,
		PoolSize: 16,
	})
}

func newRedlockWorker(raw json.RawMessage) (driver.Store, func(), error) {
	var cfg redlockConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, nil, fmt.Errorf("redlock configuration: %w", err)
	}
	clients := make([]redis.UniversalClient, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		clients[i] = redlockClient(a)
	}
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	b, err := redlock.New(clients)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return b, closeAll, nil
}

// redlockStore is the masters, seen from the demo's master process.
type redlockStore struct {
	servers []*redisserver.Server
	clients []*redis.Client // the probes' own
	logf    func(string, ...any)
}

func startRedlockStore(n int, logf func(string, ...any)) (*redlockStore, error) {
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("invalid redlock masters %d: want an odd number, 3 or more", n)
	}
	s := &redlockStore{logf: logf}
	for range n {
		srv, err := redisserver.Start(redisserver.Options{})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("starting a redis-server for redlock: %w", err)
		}
		s.servers = append(s.servers, srv)
		s.clients = append(s.clients, redlockClient(srv.Addr()))
	}
	logf("redlock: started %d redis-servers as independent masters", n)
	return s, nil
}

func (s *redlockStore) Describe() string {
	return fmt.Sprintf("redlock over %d private redis-servers (independent masters, quorum %d)", len(s.servers), len(s.servers)/2+1)
}

func (s *redlockStore) Config() json.RawMessage {
	var cfg redlockConfig
	for _, srv := range s.servers {
		cfg.Addrs = append(cfg.Addrs, srv.Addr())
	}
	raw, _ := json.Marshal(cfg)
	return raw
}

// Fence reads the lock's fence on every master: the lock is held with a
// fence when a majority of them carry it (as the backend counts a hold).
func (s *redlockStore) Fence(ctx context.Context, namespace, key string) (int64, error) {
	lk := keysFor(namespace, key).lock
	vals := make([]string, len(s.clients))
	errs := make([]error, len(s.clients))
	var wg sync.WaitGroup
	for i, c := range s.clients {
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			vals[i], errs[i] = c.HGet(qctx, lk, "fence").Result()
		})
	}
	wg.Wait()
	count := map[string]int{}
	answered := 0
	for i, v := range vals {
		switch {
		case errs[i] == nil:
			count[v]++
			answered++
		case errors.Is(errs[i], redis.Nil):
			answered++
		}
	}
	quorum := len(s.clients)/2 + 1
	for v, n := range count {
		if n >= quorum {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	if answered < quorum {
		return 0, fmt.Errorf("redlock: %d of %d masters answered: %w", answered, len(s.clients), errors.Join(errs...))
	}
	return 0, nil
}

// Restart kill -9s a minority of the masters (2 of 5, 1 of 3), keeps them
// down for longer than the lease and starts them again empty. That is the
// rule for masters without persistence (package redlock): a master that
// forgot its locks must not vote again before every lock it granted has
// expired, or a lock held on a bare majority could be granted twice.
func (s *redlockStore) Restart(ctx context.Context, lease time.Duration) (string, error) {
	minority := len(s.servers) / 2
	for _, srv := range s.servers[:minority] {
		if err := srv.Kill(); err != nil {
			return "", fmt.Errorf("kill -9 redis-server %s: %w", srv.Addr(), err)
		}
	}
	down := lease + 250*time.Millisecond
	s.logf("redlock: kill -9 %d of %d masters; down for %v (longer than the lease)", minority, len(s.servers), down)
	if !sleepCtx(ctx, down) {
		return "", ctx.Err()
	}
	for _, srv := range s.servers[:minority] {
		if err := srv.Restart(); err != nil {
			return "", fmt.Errorf("restarting redis-server %s: %w", srv.Addr(), err)
		}
	}
	return fmt.Sprintf("%d of %d masters", minority, len(s.servers)), nil
}

func (s *redlockStore) Close() error {
	for _, c := range s.clients {
		c.Close()
	}
	var errs []error
	for _, srv := range s.servers {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}
