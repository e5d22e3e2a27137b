package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// locker is one lock library under test, connected to one redis-server.
type locker interface {
	// lock takes the lock named key. With wait 0 it makes one attempt;
	// otherwise it waits the library's natural way, for at most wait. It
	// returns the function that releases the lock.
	lock(key string, wait time.Duration) (release func() error, err error)
	// close disconnects.
	close() error
}

// library names a locker and how to connect one.
type library struct {
	name    string
	connect func(addr string) (locker, error)
}

const fencelockName = "fencelock"

// libraries are the libraries measured, in order; fencelock first.
var libraries = []library{
	{fencelockName, newFencelock},
	{"redsync", newRedsync},
	{"redislock", newRedislock},
	{"rueidislock", newRueidislock},
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

// errNotHeld is returned by a release that found the lock gone.
var errNotHeld = errors.New("release: lock was not held")

// newGoRedis returns the go-redis client every go-redis based library uses.
func newGoRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
}

// fencelockLocker uses Client.TryAcquire, or Client.Acquire with WithWait
// (woken by pub/sub release messages), and Lock.Release.
type fencelockLocker struct {
	rdb    *redis.Client
	client *fencelock.Client
}

func newFencelock(addr string) (locker, error) {
	rdb := newGoRedis(addr)
	return &fencelockLocker{rdb: rdb, client: fencelock.New(redisbackend.New(rdb))}, nil
}

func (l *fencelockLocker) lock(key string, wait time.Duration) (func() error, error) {
	ctx := context.Background()
	var lk *fencelock.Lock
	var err error
	if wait == 0 {
		lk, err = l.client.TryAcquire(ctx, key, lockTTL)
	} else {
		lk, err = l.client.Acquire(ctx, key, lockTTL, fencelock.WithWait(wait))
	}
	if err != nil {
		return nil, err
	}
	return func() error { return lk.Release(ctx) }, nil
}

func (l *fencelockLocker) close() error {
	return errors.Join(l.client.Close(), l.rdb.Close())
}

// redsyncLocker uses one redsync pool (quorum 1) on go-redis v9, retrying
// every 50 ms while waiting.
type redsyncLocker struct {
	rdb *redis.Client
	rs  *redsync.Redsync
}

// redsyncRetryDelay is redsync's delay between attempts while waiting.
const redsyncRetryDelay = 50 * time.Millisecond

func newRedsync(addr string) (locker, error) {
	rdb := newGoRedis(addr)
	return &redsyncLocker{rdb: rdb, rs: redsync.New(redsyncgoredis.NewPool(rdb))}, nil
}

func (l *redsyncLocker) lock(key string, wait time.Duration) (func() error, error) {
	ctx := context.Background()
	// Enough tries to cover the wait; the context deadline ends it anyway.
	tries := int(wait/redsyncRetryDelay) + 2
	m := l.rs.NewMutex(key, redsync.WithExpiry(lockTTL), redsync.WithTries(tries),
		redsync.WithRetryDelay(redsyncRetryDelay))
	if wait == 0 {
		if err := m.TryLockContext(ctx); err != nil {
			return nil, err
		}
	} else {
		wctx, cancel := context.WithTimeout(ctx, wait)
		err := m.LockContext(wctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return func() error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errNotHeld
		}
		return err
	}, nil
}

func (l *redsyncLocker) close() error { return l.rdb.Close() }

// redislockLocker uses bsm/redislock with a linear backoff of 100 ms and a
// context deadline while waiting.
type redislockLocker struct {
	rdb    *redis.Client
	client *redislock.Client
}

func newRedislock(addr string) (locker, error) {
	rdb := newGoRedis(addr)
	return &redislockLocker{rdb: rdb, client: redislock.New(rdb)}, nil
}

func (l *redislockLocker) lock(key string, wait time.Duration) (func() error, error) {
	ctx := context.Background()
	var lk *redislock.Lock
	var err error
	if wait == 0 {
		lk, err = l.client.Obtain(ctx, key, lockTTL, nil) // nil options: no retry
	} else {
		wctx, cancel := context.WithTimeout(ctx, wait)
		lk, err = l.client.Obtain(wctx, key, lockTTL, &redislock.Options{
			RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond),
		})
		cancel()
	}
	if err != nil {
		return nil, err
	}
	return func() error { return lk.Release(ctx) }, nil
}

func (l *redislockLocker) close() error { return l.rdb.Close() }

// rueidislockLocker uses one rueidislock Locker (its own rueidis client,
// which pipelines every goroutine's commands over a shared connection)
// with one key per lock (KeyMajority 1, like the other libraries) and a
// 10 s key validity. Waiters are woken by client-side-caching invalidations
// and by releases made through the same Locker.
type rueidislockLocker struct {
	locker rueidislock.Locker
}

func newRueidislock(addr string) (locker, error) {
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:  1,
		KeyValidity:  lockTTL,
	})
	if err != nil {
		return nil, err
	}
	return &rueidislockLocker{locker: lk}, nil
}

func (l *rueidislockLocker) lock(key string, wait time.Duration) (func() error, error) {
	var cancelLock context.CancelFunc
	var err error
	if wait == 0 {
		_, cancelLock, err = l.locker.TryWithContext(context.Background(), key)
		if err != nil {
			return nil, err
		}
		return func() error { cancelLock(); return nil }, nil
	}
	// The lock's context derives from wctx: cancelling wctx releases it, so
	// wctx lives until the release.
	wctx, cancelWait := context.WithTimeout(context.Background(), wait)
	_, cancelLock, err = l.locker.WithContext(wctx, key)
	if err != nil {
		cancelWait()
		return nil, err
	}
	return func() error {
		cancelLock() // deletes the key and waits for that
		cancelWait()
		return nil
	}, nil
}

func (l *rueidislockLocker) close() error {
	l.locker.Close()
	return nil
}
