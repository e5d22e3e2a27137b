package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// fairFloorName is not a library but a yardstick for the contended
// workloads: the least that a fenced lock which lines its waiters up on
// the server and wakes the next one by pub/sub (what fencelock's
// WithFairness does) can do per hand-off on go-redis. A waiter that finds
// the lock held joins a list on the server in the same script; a release
// pops the next waiter, takes the lock for it with a new fence, and
// publishes the fence on that waiter's process's own channel, which one
// subscription per process reads. It has nothing else: no place leases (a
// waiter that crashed or gave up stays in the line, and the lock is
// handed to nobody until its lease ends), no tombstones, no clock floor
// under the fences, no renewal. Polling peers keep their processes and
// Redis busy between hand-offs; this row shows what a lock woken by
// messages can do on the same machine, and fencelock-fair's distance to it
// what fencelock's other guarantees cost in a busy line.
const fairFloorName = "fair-floor"

var (
	// fairFloorAcquire: KEYS lock, fence counter, line; ARGV waiter, ttl.
	// Returns the fence, or 0 after joining the line.
	fairFloorAcquire = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
redis.call('RPUSH', KEYS[3], ARGV[1])
return 0`)
	// fairFloorRelease: KEYS lock, fence counter, line; ARGV waiter, ttl.
	// Returns 1 when the lock was handed on, 0 when freed, -1 when not held.
	fairFloorRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local next = redis.call('LPOP', KEYS[3])
if not next then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], next, 'PX', ARGV[2])
local fence = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', string.match(next, '^(.-)|'), next .. '|' .. fence)
return 1`)
)

type fairFloorLocker struct {
	rdb     *redis.Client
	ps      *redis.PubSub
	ttl     time.Duration
	channel string // this process's own channel: waiter ids start with it

	mu      sync.Mutex
	seq     int64
	waiters map[string]chan struct{} // by waiter id, until its turn comes
	done    chan struct{}            // closed when the receiver has stopped
}

func newFairFloor(addr string, ttl, _ time.Duration) (locker, error) {
	rdb := newGoRedis(addr)
	l := &fairFloorLocker{rdb: rdb, ttl: ttl, channel: "fair-floor:" + rand.Text(),
		waiters: map[string]chan struct{}{}, done: make(chan struct{})}
	l.ps = rdb.Subscribe(context.Background(), l.channel)
	if _, err := l.ps.Receive(context.Background()); err != nil { // the subscription is live
		return nil, errors.Join(err, l.ps.Close(), rdb.Close())
	}
	go l.receive()
	return l, nil
}

// receive wakes the waiter each message names, until the subscription is
// closed.
func (l *fairFloorLocker) receive() {
	defer close(l.done)
	for {
		msg, err := l.ps.ReceiveMessage(context.Background())
		if err != nil {
			return
		}
		id := msg.Payload[:strings.LastIndexByte(msg.Payload, '|')]
		l.mu.Lock()
		if wake, ok := l.waiters[id]; ok {
			close(wake)
			delete(l.waiters, id)
		}
		l.mu.Unlock()
	}
}

// cycle takes the lock (joining the line while it is held), calls inside
// and releases it.
func (l *fairFloorLocker) cycle(ctx context.Context, key string, inside func()) error {
	l.mu.Lock()
	l.seq++
	id := l.channel + "|" + strconv.FormatInt(l.seq, 10)
	wake := make(chan struct{})
	l.waiters[id] = wake // before the script: the grant may come at once
	l.mu.Unlock()
	keys := []string{"{" + key + "}:lock", "{" + key + "}:fence", "{" + key + "}:line"}
	ttl := l.ttl.Milliseconds()
	fence, err := fairFloorAcquire.Run(ctx, l.rdb, keys, id, ttl).Int64()
	if err == nil && fence == 0 {
		select {
		case <-wake:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil || fence > 0 {
		l.mu.Lock()
		delete(l.waiters, id)
		l.mu.Unlock()
	}
	if err != nil {
		return err
	}
	inside()
	n, err := fairFloorRelease.Run(ctx, l.rdb, keys, id, ttl).Int64()
	if err != nil {
		return err
	}
	if n < 0 {
		return errNotHeld
	}
	return nil
}

// hold is not measured: the yardstick has no renewal of its own.
func (l *fairFloorLocker) hold(context.Context, string, time.Duration, time.Duration) (heldLock, error) {
	return nil, fmt.Errorf("%s is a yardstick for the contended workloads; it holds no locks", fairFloorName)
}

func (l *fairFloorLocker) close() error {
	err := l.ps.Close()
	<-l.done
	return errors.Join(err, l.rdb.Close())
}
