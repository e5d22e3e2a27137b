package main

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
)

// backendAloneName is not a library but a yardstick: fencelock's Redis
// backend called directly, without the Client. Its cycle runs fencelock's
// own acquire and release scripts (with what they do beyond the fenced
// floor: the clock floor under the tokens, the tombstone check, the hold
// kept in a hash with a lease of its own) through the same go-redis client,
// and nothing of the Client: no waiter, no lease keeper (no loss
// detection), no hooks, no hand-off. Between fenced-floor and fencelock it
// tells what fencelock's scripts cost over the floor's from what its
// Client costs over its scripts.
const backendAloneName = "fencelock-backend"

type backendAloneLocker struct {
	rdb     *redis.Client
	backend *redisbackend.Backend
	ttl     time.Duration
}

func newBackendAlone(addr string, ttl, _ time.Duration) (locker, error) {
	rdb := newGoRedis(addr)
	return &backendAloneLocker{rdb: rdb, backend: redisbackend.New(rdb), ttl: ttl}, nil
}

// cycle takes the lock (polling while it is held), calls inside and
// releases it.
func (l *backendAloneLocker) cycle(ctx context.Context, key string, inside func()) error {
	token, err := randomToken()
	if err != nil {
		return err
	}
	ref := driver.Ref{Key: key, Token: token}
	err = pollUntil(ctx, func() (bool, error) {
		res, err := l.backend.Acquire(ctx, driver.Request{Ref: ref, Owner: token, TTL: l.ttl})
		return res.Acquired, err
	})
	if err != nil {
		return err
	}
	inside()
	res, err := l.backend.Release(ctx, driver.ReleaseRequest{Ref: ref})
	if err != nil {
		return err
	}
	if !res.Held {
		return errNotHeld
	}
	return nil
}

// hold is not measured: renewal is the Client's (its lease keeper).
func (l *backendAloneLocker) hold(context.Context, string, time.Duration, time.Duration) (heldLock, error) {
	return nil, errors.New(backendAloneName + " is a yardstick for the uncontended cycle; it holds no locks")
}

func (l *backendAloneLocker) close() error {
	l.backend.Close()
	return l.rdb.Close()
}
