package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// masterWithReplica starts a master and one replica of it, and waits until
// the replica is in sync. It returns a client of the master and the replica
// server (to pause it).
func masterWithReplica(t *testing.T) (*redis.Client, interface {
	Pause() error
	Resume() error
}) {
	t.Helper()
	master := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	// Sync at once, not after Redis's default 5 s wait for more replicas.
	if err := rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	replica := servertest.Redis(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port()))
	pollUntil(t, 30*time.Second, "the replica in sync", func() bool {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	// "online" is not enough: after a diskless sync the master streams
	// nothing to the replica, WAIT's GETACK included, until the replica's
	// first REPLCONF ACK, which it sends up to a second later. Until then
	// WAIT counts no replica (CI saw "0 of 1 replicas acknowledged"). Wait
	// for a write the replica has acknowledged, on one connection as WAIT
	// requires.
	pollUntil(t, 30*time.Second, "the replica acknowledging writes", func() bool {
		var wait *redis.IntCmd
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "test:replica-ack-probe", "1", time.Second)
			wait = redis.NewIntCmd(ctx, "WAIT", 1, 200)
			_ = p.Process(ctx, wait)
			return nil
		})
		return err == nil && wait.Val() == 1
	})
	return rdb, replica
}

// WithReplicaAck: an acquire and a renewal count only when a replica has
// acknowledged them; without an acknowledgement the acquire is undone and
// fails with ErrNotReplicated (and ErrNotAcquired), and a renewal does not
// extend the lease.
func TestReplicaAck(t *testing.T) {
	rdb, replica := masterWithReplica(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := fencelock.New(redisbackend.New(rdb, redisbackend.WithReplicaAck(1, 300*time.Millisecond)))
	t.Cleanup(func() { replica.Resume(); c.Close() })

	lk, err := c.TryAcquire(ctx, "acked", 10*time.Second)
	if err != nil {
		t.Fatalf("acquire with a live replica: %v", err)
	}
	if err := lk.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatalf("refresh with a live replica: %v", err)
	}

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, "unacked", 10*time.Second)
	if !errors.Is(err, fencelock.ErrNotReplicated) || !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("acquire with the replica paused: %v, want ErrNotReplicated and ErrNotAcquired", err)
	}
	if n := rdb.Exists(ctx, "lock:{unacked}:lock").Val(); n != 0 {
		t.Fatal("an acquire no replica acknowledged was left on the master")
	}
	before := lk.Deadline()
	err = lk.Refresh(ctx, time.Minute)
	if !errors.Is(err, fencelock.ErrNotReplicated) {
		t.Fatalf("refresh with the replica paused: %v, want ErrNotReplicated", err)
	}
	if lk.Deadline().After(before) {
		t.Fatalf("an unacknowledged renewal moved the deadline from %v to %v", before, lk.Deadline())
	}
	if !lk.Held() {
		t.Fatalf("the lock was lost by an unacknowledged renewal: %v", lk.Err())
	}

	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	lk2, err := c.Acquire(ctx, "unacked", 10*time.Second, fencelock.WithWait(20*time.Second))
	if err != nil {
		t.Fatalf("acquire after the replica resumed: %v", err)
	}
	lk2.Release(ctx)
	lk.Release(ctx)
}

// An invalid WithReplicaAck makes every call fail with ErrInvalidArgument.
func TestReplicaAckInvalid(t *testing.T) {
	for _, opt := range []redisbackend.Option{
		redisbackend.WithReplicaAck(0, time.Second),
		redisbackend.WithReplicaAck(1, 0),
	} {
		b, _ := newBackend(t, opt)
		_, err := b.Acquire(context.Background(), acquireReq("k", "a", "a", time.Second))
		if !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Acquire: %v, want ErrInvalidArgument", err)
		}
	}
}
