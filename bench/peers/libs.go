package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisbackend/rueidistransport"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// locker is one lock library under test, connected to one redis-server, as
// one process of an application would use it: one client shared by all the
// process's goroutines.
type locker interface {
	// cycle takes the lock named key the library's usual waiting way, bounded
	// by ctx (a request context with a timeout, as an HTTP handler has), calls
	// inside while holding it, and releases it. It returns an error if the
	// lock was not taken, or was taken but not released cleanly.
	cycle(ctx context.Context, key string, inside func()) error

	// hold takes the lock named key with a lease of ttl, renewed every renew
	// until the returned lock is released; ctx bounds the acquire only.
	hold(ctx context.Context, key string, ttl, renew time.Duration) (heldLock, error)

	// close disconnects.
	close() error
}

// heldLock is one lock taken by locker.hold.
type heldLock interface {
	// lost reports whether the library (or, for libraries without automatic
	// renewal, the benchmark's renewal goroutine) found the lock lost.
	lost() bool
	// renewErrors counts the benchmark's failed renewals (libraries with
	// automatic renewal: 0, they retry out of sight).
	renewErrors() int64
	release(ctx context.Context) error
}

// library names a locker, how its process connects it, and the settings it
// runs with (printed with the results).
type library struct {
	name     string
	settings string
	connect  func(addr string, ttl, renew time.Duration) (locker, error)
	// noHeld: not run in the held-locks workload (a variant of another
	// library that would measure the same thing).
	noHeld bool
	// yardstickFor: not a library but a yardstick (fenced-floor,
	// fair-floor), run only in these workloads, and never the best peer.
	yardstickFor []string
}

// runs reports whether the library is measured in workload w.
func (l library) runs(w workloadDef) bool {
	switch {
	case l.yardstickFor != nil:
		return slices.Contains(l.yardstickFor, w.name)
	case l.noHeld:
		return w.kind != kindHeld
	}
	return true
}

const (
	fencelockName     = "fencelock"
	fencelockDoName   = "fencelock-Do"
	fencelockFairName = "fencelock-fair"
	fencelockRueidis  = "fencelock-rueidis"

	fencelockDefaultClientName = "fencelock-default-client"
)

// Peers' waiting settings. The peers' defaults poll far more slowly (redsync
// 50–250 ms, redislock no retry at all), which makes them look worse under
// contention than they can be; these are the fastest settings a user would
// reasonably choose: the peers' best settings.
const (
	// redsyncRetryDelay: redsync's delay between attempts while waiting
	// (WithRetryDelay; its default is a random 50–250 ms).
	redsyncRetryDelay = time.Millisecond
	// redislockBackoff: bsm/redislock's LinearBackoff step (its default is
	// NoRetry, so a waiting user must pick one).
	redislockBackoff = time.Millisecond
)

// libraries are the libraries measured, in order; fencelock first.
var libraries = []library{
	{
		name: fencelockName,
		settings: "Client.Acquire(ctx, key, ttl) with the request context, Lock.Release(ctx); " +
			"waiting woken by pub/sub release messages; held locks: WithAutoRenew(renew interval)",
		connect: newFencelock,
	},
	{
		name: fencelockDoName,
		settings: "Client.Do(ctx, key, ttl, fn) with the request context: acquire, renew every ttl/3 " +
			"while fn runs (Do's default), release",
		connect: newFencelockDo,
		noHeld:  true, // Do holds a lock only while fn runs: the held-locks workload is WithAutoRenew's
	},
	{
		name: fencelockFairName,
		settings: "Client.Acquire(ctx, key, ttl, WithFairness()) with the request context, Lock.Release(ctx): " +
			"one line of waiters on the server for every process; each release hands the lock to the next waiter (a grant) and tells it alone",
		connect: newFencelockFair,
		noHeld:  true, // fairness changes waiting only: the held-locks workload is WithAutoRenew's
	},
	{
		name: fencelockRueidis,
		settings: "fencelock as in the first column, on a rueidis client (redisbackend/rueidistransport; " +
			"its defaults: auto-pipelining, client-side caching off) instead of go-redis: " +
			"every call of the process shares rueidis's pipelined connection",
		connect: newFencelockRueidis,
	},
	{
		name: "redsync",
		settings: fmt.Sprintf("one go-redis pool (quorum 1), Mutex.LockContext(ctx) retrying every %v "+
			"(WithRetryDelay; default 50–250 ms), UnlockContext; held locks: ExtendContext every renew "+
			"interval from one benchmark goroutine per lock, retried at the next tick after an error (redsync has no automatic renewal)", redsyncRetryDelay),
		connect: newRedsync,
	},
	{
		name: "redislock",
		settings: fmt.Sprintf("Client.Obtain(ctx, key, ttl, LinearBackoff(%v)), Lock.Release(ctx); held locks: "+
			"Lock.Refresh every renew interval from one benchmark goroutine per lock, retried at the next tick after an "+
			"error (redislock has no automatic renewal)", redislockBackoff),
		connect: newRedislock,
	},
	{
		name: "rueidislock",
		settings: "NewLocker with its defaults and the README's recommendations for one Redis node " +
			"(KeyMajority 1, NoLoopTracking on Redis >= 7.0.5, client-side caching on), KeyValidity = ttl; " +
			"WithContext(ctx, key) woken by client-side-caching invalidations, cancel to release; held locks: " +
			"its own keep-alive, ExtendInterval = renew interval",
		connect: newRueidislock,
	},
	{
		name: fencelockDefaultClientName,
		settings: "not a library: fencelock as in the first column, on a go-redis client with go-redis's default " +
			"options (PoolSize 256 only, no ContextTimeoutEnabled), as most users pass theirs: redisbackend then " +
			"runs each request on a goroutine of its own so that the caller returns at its context's end. " +
			"Uncontended workloads only; never the best peer",
		connect:      newFencelockDefaultClient,
		yardstickFor: []string{"serial", "parallel64"},
	},
	{
		name: fencedFloorName,
		settings: "not a library: the least a lock with fencing tokens can do per cycle on go-redis (floor.go). " +
			"Acquire: one script, SET NX PX and INCR of the lock's counter; release: a compare-and-delete script; " +
			"nothing else (no tombstones, no clock floor under the tokens, no re-entrancy, no notification, no renewal). " +
			"Uncontended workloads only; never the best peer",
		connect:      newFencedFloor,
		yardstickFor: []string{"serial", "parallel64"},
	},
	{
		name: backendAloneName,
		settings: "not a library: fencelock's Redis backend called directly, without the Client (backendalone.go): " +
			"fencelock's acquire and release scripts through the same go-redis client, polling every 1 ms while held; " +
			"no waiter, no lease keeper, no hooks. Between fenced-floor and fencelock: what fencelock's scripts add " +
			"to the floor's, and what its Client adds to its scripts. Uncontended workloads only; never the best peer",
		connect:      newBackendAlone,
		yardstickFor: []string{"serial", "parallel64"},
	},
	{
		name: fairFloorName,
		settings: "not a library: the least a fenced lock that lines its waiters up on the server and wakes the next " +
			"by pub/sub can do per hand-off on go-redis (fairfloor.go). Acquire: one script, SET NX PX and INCR, " +
			"or RPUSH to the line; release: one script, LPOP the next waiter, SET the lock for it, INCR, PUBLISH on " +
			"its process's channel; nothing else (no place leases: a waiter that gave up blocks the line until the " +
			"lease ends; no tombstones, no clock floor, no renewal). Contended workloads only; never the best peer",
		connect:      newFairFloor,
		yardstickFor: []string{"contended", "contended-procs"},
	},
}

// isYardstick reports whether name is a yardstick rather than a library.
func isYardstick(name string) bool {
	l, ok := libraryByName(name)
	return ok && l.yardstickFor != nil
}

func libraryNames() []string {
	names := make([]string, len(libraries))
	for i, l := range libraries {
		names[i] = l.name
	}
	return names
}

func libraryByName(name string) (library, bool) {
	for _, l := range libraries {
		if l.name == name {
			return l, true
		}
	}
	return library{}, false
}

// isFencelock reports whether name is fencelock or a variant of it.
func isFencelock(name string) bool {
	return name == fencelockName || name == fencelockDoName || name == fencelockFairName || name == fencelockRueidis
}

// isPeer reports whether name is a peer library: neither fencelock nor a
// yardstick.
func isPeer(name string) bool {
	return !isFencelock(name) && !isYardstick(name)
}

// errNotHeld is returned by a release that found the lock gone.
var errNotHeld = errors.New("release: lock was not held")

// poolSize is the go-redis pool of every go-redis based library: large
// enough that 64 goroutines never wait for a connection (go-redis's
// default is 10 per CPU).
const poolSize = 256

// goRedisSettings describes newGoRedis, for the output.
const goRedisSettings = "go-redis v9 clients: PoolSize 256, ContextTimeoutEnabled (as fencelock's README asks; " +
	"the same for every go-redis based library but fencelock-default-client)"

// newGoRedis returns the go-redis client every go-redis based library uses.
// ContextTimeoutEnabled makes go-redis end a request at its context's
// deadline: fencelock's README and redisbackend ask for it (without it,
// redisbackend runs each request on a goroutine of its own to honour the
// deadline); it costs the other libraries nothing and makes them honour
// the request context too.
func newGoRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize, ContextTimeoutEnabled: true})
}

// --- fencelock ---

type fencelockLocker struct {
	conn   interface{ Close() error } // the Redis client, closed after the Client
	client *fencelock.Client
	ttl    time.Duration
	do     bool                      // cycle through Client.Do instead of Acquire + Release
	opts   []fencelock.AcquireOption // of every cycle's acquire
}

func newFencelock(addr string, ttl, _ time.Duration) (locker, error) {
	rdb := newGoRedis(addr)
	return &fencelockLocker{conn: rdb, client: fencelock.New(redisbackend.New(rdb)), ttl: ttl}, nil
}

func newFencelockDefaultClient(addr string, ttl, _ time.Duration) (locker, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	return &fencelockLocker{conn: rdb, client: fencelock.New(redisbackend.New(rdb)), ttl: ttl}, nil
}

func newFencelockRueidis(addr string, ttl, _ time.Duration) (locker, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	conn := closerFunc(func() error { client.Close(); return nil })
	return &fencelockLocker{conn: conn, client: fencelock.New(rueidistransport.NewBackend(client)), ttl: ttl}, nil
}

// closerFunc is a Close method of a client whose Close returns nothing.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func newFencelockDo(addr string, ttl, renew time.Duration) (locker, error) {
	l, err := newFencelock(addr, ttl, renew)
	if err != nil {
		return nil, err
	}
	l.(*fencelockLocker).do = true
	return l, nil
}

func newFencelockFair(addr string, ttl, renew time.Duration) (locker, error) {
	l, err := newFencelock(addr, ttl, renew)
	if err != nil {
		return nil, err
	}
	l.(*fencelockLocker).opts = []fencelock.AcquireOption{fencelock.WithFairness()}
	return l, nil
}

func (l *fencelockLocker) cycle(ctx context.Context, key string, inside func()) error {
	if l.do {
		return l.client.Do(ctx, key, l.ttl, func(context.Context, *fencelock.Lock) error {
			inside()
			return nil
		}, l.opts...)
	}
	lk, err := l.client.Acquire(ctx, key, l.ttl, l.opts...)
	if err != nil {
		return err
	}
	inside()
	return lk.Release(ctx)
}

func (l *fencelockLocker) hold(ctx context.Context, key string, ttl, renew time.Duration) (heldLock, error) {
	lk, err := l.client.Acquire(ctx, key, ttl, fencelock.WithAutoRenew(renew))
	if err != nil {
		return nil, err
	}
	return fencelockHeld{lk}, nil
}

type fencelockHeld struct{ lk *fencelock.Lock }

func (h fencelockHeld) lost() bool                        { return errors.Is(h.lk.Err(), fencelock.ErrLost) }
func (h fencelockHeld) release(ctx context.Context) error { return h.lk.Release(ctx) }
func (h fencelockHeld) renewErrors() int64                { return 0 }

func (l *fencelockLocker) close() error {
	return errors.Join(l.client.Close(), l.conn.Close())
}

// --- redsync ---

type redsyncLocker struct {
	rdb *redis.Client
	rs  *redsync.Redsync
	ttl time.Duration
}

func newRedsync(addr string, ttl, _ time.Duration) (locker, error) {
	rdb := newGoRedis(addr)
	return &redsyncLocker{rdb: rdb, rs: redsync.New(redsyncgoredis.NewPool(rdb)), ttl: ttl}, nil
}

// mutex returns a redsync mutex that retries every redsyncRetryDelay for as
// long as ctx allows (redsync counts tries, not time: enough tries to cover
// the context's deadline; the deadline ends it first).
func (l *redsyncLocker) mutex(ctx context.Context, key string, ttl time.Duration) *redsync.Mutex {
	tries := 32 // redsync's default
	if d, ok := ctx.Deadline(); ok {
		tries = int(time.Until(d)/redsyncRetryDelay) + 2
	}
	return l.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(tries),
		redsync.WithRetryDelay(redsyncRetryDelay))
}

func (l *redsyncLocker) cycle(ctx context.Context, key string, inside func()) error {
	m := l.mutex(ctx, key, l.ttl)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	inside()
	ok, err := m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errNotHeld
	}
	return err
}

func (l *redsyncLocker) hold(ctx context.Context, key string, ttl, renew time.Duration) (heldLock, error) {
	m := l.mutex(ctx, key, ttl)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return startRenewer(ttl, renew, func(ctx context.Context) (bool, error) {
		ok, err := m.ExtendContext(ctx)
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) {
			return false, nil
		}
		return ok, err
	}, func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errNotHeld
		}
		return err
	}), nil
}

func (l *redsyncLocker) close() error { return l.rdb.Close() }

// --- bsm/redislock ---

type redislockLocker struct {
	rdb    *redis.Client
	client *redislock.Client
	ttl    time.Duration
}

func newRedislock(addr string, ttl, _ time.Duration) (locker, error) {
	rdb := newGoRedis(addr)
	return &redislockLocker{rdb: rdb, client: redislock.New(rdb), ttl: ttl}, nil
}

func (l *redislockLocker) obtain(ctx context.Context, key string, ttl time.Duration) (*redislock.Lock, error) {
	return l.client.Obtain(ctx, key, ttl, &redislock.Options{
		RetryStrategy: redislock.LinearBackoff(redislockBackoff),
	})
}

func (l *redislockLocker) cycle(ctx context.Context, key string, inside func()) error {
	lk, err := l.obtain(ctx, key, l.ttl)
	if err != nil {
		return err
	}
	inside()
	return lk.Release(ctx)
}

func (l *redislockLocker) hold(ctx context.Context, key string, ttl, renew time.Duration) (heldLock, error) {
	lk, err := l.obtain(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return startRenewer(ttl, renew, func(ctx context.Context) (bool, error) {
		err := lk.Refresh(ctx, ttl, nil)
		if errors.Is(err, redislock.ErrNotObtained) {
			return false, nil
		}
		return err == nil, err
	}, lk.Release), nil
}

func (l *redislockLocker) close() error { return l.rdb.Close() }

// renewer is what a careful user of a library without automatic renewal
// writes: one goroutine per held lock, extending it on a ticker until
// released. An extension that finds the lock taken or gone marks it lost
// and ends the goroutine; one that fails otherwise (a timeout, no free
// connection in the pool) is retried at the next tick, and the lock counts
// as lost only once no extension has succeeded for a whole ttl.
type renewer struct {
	ttl      time.Duration
	stop     chan struct{}
	done     chan struct{}
	isLost   atomic.Bool
	lastOK   atomic.Int64 // unix nanoseconds of the acquire or the last extension
	failures atomic.Int64
	unlockFn func(context.Context) error
}

// extendFunc extends a lock; held false with a nil error means the lock is
// certainly no longer ours.
type extendFunc func(ctx context.Context) (held bool, err error)

func startRenewer(ttl, every time.Duration, extend extendFunc, unlock func(context.Context) error) *renewer {
	r := &renewer{ttl: ttl, stop: make(chan struct{}), done: make(chan struct{}), unlockFn: unlock}
	r.lastOK.Store(time.Now().UnixNano())
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), every)
				held, err := extend(ctx)
				cancel()
				switch {
				case err != nil:
					r.failures.Add(1)
				case !held:
					r.isLost.Store(true)
					return
				default:
					r.lastOK.Store(t0.UnixNano())
				}
			}
		}
	}()
	return r
}

func (r *renewer) lost() bool {
	return r.isLost.Load() || time.Since(time.Unix(0, r.lastOK.Load())) >= r.ttl
}

func (r *renewer) renewErrors() int64 { return r.failures.Load() }

func (r *renewer) release(ctx context.Context) error {
	close(r.stop)
	<-r.done
	return r.unlockFn(ctx)
}

// --- rueidislock ---

type rueidislockLocker struct {
	locker rueidislock.Locker
}

func newRueidislock(addr string, ttl, renew time.Duration) (locker, error) {
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,    // README: KeyMajority=1 with one Redis instance
		NoLoopTracking: true, // README: better performance with Redis >= 7.0.5
		KeyValidity:    ttl,
		ExtendInterval: renew, // 0: its default, KeyValidity/2
	})
	if err != nil {
		return nil, err
	}
	return &rueidislockLocker{locker: lk}, nil
}

func (l *rueidislockLocker) cycle(ctx context.Context, key string, inside func()) error {
	// The lock is a context derived from ctx; its cancel releases the lock
	// (deleting the key, and waiting for that).
	_, cancel, err := l.locker.WithContext(ctx, key)
	if err != nil {
		return err
	}
	inside()
	cancel()
	return nil
}

// hold acquires with a context without deadline: rueidislock shortens a
// lock's validity to its context's deadline, and the lock's context lives
// as long as the lock.
func (l *rueidislockLocker) hold(ctx context.Context, key string, _, _ time.Duration) (heldLock, error) {
	lctx, cancelLife := context.WithCancel(context.Background())
	// Give up waiting when ctx ends, as the other libraries do.
	stop := context.AfterFunc(ctx, cancelLife)
	lockCtx, cancel, err := l.locker.WithContext(lctx, key)
	if !stop() && err == nil { // ctx ended just as the lock was taken
		cancel()
		err = ctx.Err()
	}
	if err != nil {
		cancelLife()
		return nil, err
	}
	return &rueidisHeld{ctx: lockCtx, cancel: func() { cancel(); cancelLife() }}, nil
}

type rueidisHeld struct {
	ctx      context.Context
	cancel   func()
	released atomic.Bool
}

func (h *rueidisHeld) lost() bool { return !h.released.Load() && h.ctx.Err() != nil }

func (h *rueidisHeld) renewErrors() int64 { return 0 }

func (h *rueidisHeld) release(context.Context) error {
	h.released.Store(true)
	h.cancel()
	return nil
}

func (l *rueidislockLocker) close() error {
	l.locker.Close()
	return nil
}
