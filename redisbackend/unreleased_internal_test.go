package redisbackend

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// failFirstRelease is a Transport that fails the first run of the release
// script s it is given, without sending it, as a connection that breaks at
// that moment would: a fault a real server cannot produce on demand
// between two given requests. Everything else goes to the real server.
type failFirstRelease struct {
	Transport
	s      script
	failed atomic.Bool
}

var errReleaseCut = errors.New("connection cut by the test")

func (f *failFirstRelease) Do(ctx context.Context, cmds []Command) []Reply {
	for _, c := range cmds {
		if len(c.Args) > 1 && (c.Args[1] == f.s.shaArg || c.Args[1] == f.s.srcArg) && f.failed.CompareAndSwap(false, true) {
			replies := make([]Reply, len(cmds))
			for i := range replies {
				replies[i].Err = errReleaseCut
			}
			return replies
		}
	}
	return f.Transport.Do(ctx, cmds)
}

// An acquisition too few replicas acknowledged is released again by the
// backend; when that release fails, the hold may still be on the server.
// Its error must then say neither that the store released it
// (ErrNotReplicated) nor that nothing was sent (ErrNotSent), so that the
// Client releases the hold in the background instead of leaving the key
// locked until its lease ends.
// The same holds for a permit of a semaphore.
func TestUnreplicatedAcquireWhoseReleaseFails(t *testing.T) {
	srv := servertest.Redis(t) // no replica: WAIT 1 counts none
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	t.Run("lock", func(t *testing.T) {
		unreleasedAcquire(t, rdb, releaseScript, "lock:{unreleased}:lock",
			func(ctx context.Context, c *fencelock.Client) error {
				_, err := c.TryAcquire(ctx, "unreleased", time.Minute)
				return err
			})
	})
	t.Run("semaphore", func(t *testing.T) {
		unreleasedAcquire(t, rdb, holdsReleaseScript, "lock:{unreleased-sem}:sem",
			func(ctx context.Context, c *fencelock.Client) error {
				_, err := c.Semaphore("unreleased-sem", 2).TryAcquire(ctx, time.Minute)
				return err
			})
	})
}

// unreleasedAcquire runs acquire on a Client whose backend asks for a
// replica that is not there and fails the first run of the release script
// s, and checks the error and that the hold (the key named key) is released
// in the background.
func unreleasedAcquire(t *testing.T, rdb *redis.Client, s script, key string, acquire func(context.Context, *fencelock.Client) error) {
	tr := &failFirstRelease{Transport: &goRedis{rdb: rdb}, s: s}
	c := fencelock.New(NewTransport(tr, WithReplicaAck(1, 50*time.Millisecond)))
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	err := acquire(ctx, c)
	if err == nil || !tr.failed.Load() {
		t.Fatalf("TryAcquire: %v (release failed: %v), want an error after a failed release", err, tr.failed.Load())
	}
	if errors.Is(err, driver.ErrNotReplicated) || errors.Is(err, driver.ErrNotSent) {
		t.Fatalf("TryAcquire: %v; it matches ErrNotReplicated or ErrNotSent, which say nothing is left on the server", err)
	}
	// The lease is a minute: only the Client's background release frees the
	// key sooner. Polled, with a bound that holds on a busy machine.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for rdb.Exists(ctx, key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hold whose undoing release failed is still on the server after 20s (lease 1m)")
		}
		<-tick.C
	}
}
