package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// fencedFloorName is not a library but a yardstick: the least that any lock
// handing out fencing tokens can do per uncontended cycle on go-redis. A
// fencing token must be minted in the same atomic step as the acquire, and
// no single Redis command both takes a key and returns a counter, so the
// acquire is a script: SET NX PX and, when that took the key, INCR of the
// lock's counter. The release is the usual compare-and-delete script. It has
// nothing else: no tombstones for acquires whose replies were lost, no
// clock floor under the tokens (they go back to 1 when the counter is lost),
// no re-entrancy, no holder identity, no release notification (a waiter
// polls every millisecond), no renewal. Lock libraries without fencing
// (redsync, redislock, rueidislock) take the key with SET NX alone, one
// command and no script, so this row shows what fencing costs by itself,
// and fencelock's distance to it what its other guarantees cost.
const fencedFloorName = "fenced-floor"

// yardstickPoll is how often a waiting cycle of the uncontended yardsticks
// (fenced-floor, fencelock-backend) tries again.
const yardstickPoll = time.Millisecond

var (
	floorAcquire = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)
	floorRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

type fencedFloorLocker struct {
	rdb *redis.Client
	ttl time.Duration
}

func newFencedFloor(addr string, ttl, _ time.Duration) (locker, error) {
	return &fencedFloorLocker{rdb: newGoRedis(addr), ttl: ttl}, nil
}

// cycle takes the lock (polling while it is held), calls inside and
// releases it.
func (l *fencedFloorLocker) cycle(ctx context.Context, key string, inside func()) error {
	token, err := randomToken()
	if err != nil {
		return err
	}
	keys := []string{"{" + key + "}:lock", "{" + key + "}:fence"}
	err = pollUntil(ctx, func() (bool, error) {
		fence, err := floorAcquire.Run(ctx, l.rdb, keys, token, l.ttl.Milliseconds()).Int64()
		return fence > 0, err
	})
	if err != nil {
		return err
	}
	inside()
	n, err := floorRelease.Run(ctx, l.rdb, keys[:1], token).Int64()
	if err != nil {
		return err
	}
	if n == 0 {
		return errNotHeld
	}
	return nil
}

// pollUntil calls try every yardstickPoll until it reports done, fails, or
// ctx ends.
func pollUntil(ctx context.Context, try func() (done bool, err error)) error {
	for {
		done, err := try()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(yardstickPoll):
		}
	}
}

// randomToken returns a random token for one acquisition (128 bits,
// base64url), as every peer and fencelock's Client make one.
func randomToken() (string, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(raw[:]), nil
}

// hold is not measured: the yardstick has no renewal of its own.
func (l *fencedFloorLocker) hold(context.Context, string, time.Duration, time.Duration) (heldLock, error) {
	return nil, errors.New(fencedFloorName + " is a yardstick for the uncontended cycle; it holds no locks")
}

func (l *fencedFloorLocker) close() error { return l.rdb.Close() }
