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
		unreleasedAcquire(t, rdb, releaseScript,
			func(ctx context.Context, c *fencelock.Client, opts ...fencelock.AcquireOption) (*fencelock.Lock, error) {
				return c.Acquire(ctx, "unreleased", time.Minute, opts...)
			})
	})
	t.Run("semaphore", func(t *testing.T) {
		unreleasedAcquire(t, rdb, holdsReleaseScript,
			func(ctx context.Context, c *fencelock.Client, opts ...fencelock.AcquireOption) (*fencelock.Lock, error) {
				return c.Semaphore("unreleased-sem", 1).Acquire(ctx, time.Minute, opts...)
			})
	})
}

// unreleasedAcquire makes one attempt of acquire on a Client whose backend
// asks for a replica that is not there and fails the first run of the
// release script s, and checks its error, and that another Client, without
// replica acknowledgement, then gets the lock long before the lease of a
// minute ends: only the first Client's background release frees it sooner.
func unreleasedAcquire(t *testing.T, rdb *redis.Client, s script, acquire func(context.Context, *fencelock.Client, ...fencelock.AcquireOption) (*fencelock.Lock, error)) {
	tr := &failFirstRelease{Transport: &goRedis{rdb: rdb}, s: s}
	c := fencelock.New(NewTransport(tr, WithReplicaAck(1, 50*time.Millisecond)))
	t.Cleanup(func() { c.Close() })
	other := fencelock.New(New(rdb))
	t.Cleanup(func() { other.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	_, err := acquire(ctx, c, fencelock.WithWait(0))
	if err == nil || !tr.failed.Load() {
		t.Fatalf("acquire: %v (release failed: %v), want an error after a failed release", err, tr.failed.Load())
	}
	if errors.Is(err, driver.ErrNotReplicated) || errors.Is(err, driver.ErrNotSent) {
		t.Fatalf("acquire: %v; it matches ErrNotReplicated or ErrNotSent, which say nothing is left on the server", err)
	}
	// Woken by the background release's notification; the bound is far
	// below the lease and far above what a busy machine needs.
	lk, err := acquire(ctx, other, fencelock.WithWait(20*time.Second))
	if err != nil {
		t.Fatalf("another Client's acquire: %v; the hold whose undoing release failed was left for its lease of a minute", err)
	}
	lk.Release(ctx)
}
