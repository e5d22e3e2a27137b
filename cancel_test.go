package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// errShutdown is the cause a caller gives its context's cancellation in the
// tests of how a caller's context ends an acquire.
var errShutdown = errors.New("shutting down")

// acquireCall is one acquire-like entry point of a Client, on key.
type acquireCall struct {
	name string
	call func(ctx context.Context, c *fencelock.Client, key string) error
}

// acquireCalls are every acquire-like entry point: each waits for, or
// tries once to take, a hold named after key.
func acquireCalls() []acquireCall {
	const ttl = time.Minute
	fn := func(context.Context, *fencelock.Lock) error { return nil }
	fnAll := func(context.Context, *fencelock.MultiLock) error { return nil }
	lock := func(lk *fencelock.Lock, err error) error { return err }
	multi := func(m *fencelock.MultiLock, err error) error { return err }
	return []acquireCall{
		{"Acquire", func(ctx context.Context, c *fencelock.Client, k string) error { return lock(c.Acquire(ctx, k, ttl)) }},
		{"TryAcquire", func(ctx context.Context, c *fencelock.Client, k string) error { return lock(c.TryAcquire(ctx, k, ttl)) }},
		{"Do", func(ctx context.Context, c *fencelock.Client, k string) error { return c.Do(ctx, k, ttl, fn) }},
		{"AcquireAll", func(ctx context.Context, c *fencelock.Client, k string) error {
			return multi(c.AcquireAll(ctx, []string{k, k + "2"}, ttl))
		}},
		{"AcquireAll WithWait(0)", func(ctx context.Context, c *fencelock.Client, k string) error {
			return multi(c.AcquireAll(ctx, []string{k, k + "2"}, ttl, fencelock.WithWait(0)))
		}},
		{"DoAll", func(ctx context.Context, c *fencelock.Client, k string) error {
			return c.DoAll(ctx, []string{k, k + "2"}, ttl, fnAll)
		}},
		{"Semaphore.Acquire", func(ctx context.Context, c *fencelock.Client, k string) error {
			return lock(c.Semaphore(k, 1).Acquire(ctx, ttl))
		}},
		{"Semaphore.TryAcquire", func(ctx context.Context, c *fencelock.Client, k string) error {
			return lock(c.Semaphore(k, 1).TryAcquire(ctx, ttl))
		}},
		{"RWLock.AcquireRead", func(ctx context.Context, c *fencelock.Client, k string) error {
			return lock(c.RWLock(k).AcquireRead(ctx, ttl))
		}},
		{"RWLock.TryAcquireRead", func(ctx context.Context, c *fencelock.Client, k string) error {
			return lock(c.RWLock(k).TryAcquireRead(ctx, ttl))
		}},
		{"RWLock.AcquireWrite", func(ctx context.Context, c *fencelock.Client, k string) error {
			return lock(c.RWLock(k).AcquireWrite(ctx, ttl))
		}},
		{"RWLock.TryAcquireWrite", func(ctx context.Context, c *fencelock.Client, k string) error {
			return lock(c.RWLock(k).TryAcquireWrite(ctx, ttl))
		}},
		{"Campaign", func(ctx context.Context, c *fencelock.Client, k string) error {
			_, err := c.Campaign(ctx, k, "me", ttl)
			return err
		}},
		{"RunJob", func(ctx context.Context, c *fencelock.Client, k string) error {
			ran, err := c.RunJob(ctx, fencelock.Job{Name: k, LockAtMost: ttl}, time.Now(), fn)
			if ran {
				return errors.New("ran")
			}
			return err
		}},
	}
}

// A caller whose context has already ended gets its context's error (and
// cause), not ErrNotAcquired ("busy") nor ErrUnavailable, from every
// acquire-like call on a free lock, and no request is sent. The hooks
// report the call as canceled.
func TestAcquireEndedContext(t *testing.T) {
	b := memorybackend.New()
	var outcomes []string
	c := fencelock.New(b, fencelock.WithHooks(fencelock.Hooks{AcquireDone: func(_ context.Context, e fencelock.AcquireEvent) {
		outcomes = append(outcomes, e.Outcome)
	}}))
	defer c.Close()
	cancelled, cancel := context.WithCancelCause(context.Background())
	cancel(errShutdown)
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range acquireCalls() {
		t.Run(tc.name, func(t *testing.T) {
			for _, ended := range []struct {
				ctx   context.Context
				wants []error
			}{
				{cancelled, []error{context.Canceled, errShutdown}},
				{expired, []error{context.DeadlineExceeded}},
			} {
				outcomes = nil
				err := tc.call(ended.ctx, c, "free")
				for _, want := range ended.wants {
					if !errors.Is(err, want) {
						t.Errorf("%v: does not match %v", err, want)
					}
				}
				if errors.Is(err, fencelock.ErrNotAcquired) || errors.Is(err, fencelock.ErrUnavailable) {
					t.Errorf("%v: matches ErrNotAcquired or ErrUnavailable, though the lock is free and the backend up", err)
				}
				for _, o := range outcomes {
					if o != "canceled" {
						t.Errorf("hooks report %v, want %v", o, "canceled")
					}
				}
			}
		})
	}
	if n := b.Calls(memorybackend.AllOps).Attempted; n != 0 {
		t.Fatalf("%d requests sent for calls whose context had ended, want none", n)
	}
}

// A caller's context that ends while the lock is held by someone else
// (the last attempt found it held) gives an error matching both its
// context's error and ErrNotAcquired; one that ends while the backend is
// down (the attempts failed) matches its context's error and
// ErrUnavailable, not ErrNotAcquired.
func TestAcquireContextEndsWaiting(t *testing.T) {
	for _, tc := range acquireCalls() {
		if tc.name == "TryAcquire" || tc.name == "AcquireAll WithWait(0)" || tc.name == "RunJob" ||
			tc.name == "Semaphore.TryAcquire" || tc.name == "RWLock.TryAcquireRead" || tc.name == "RWLock.TryAcquireWrite" {
			continue // one attempt, which the context does not end
		}
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memorybackend.New()
				holder := fencelock.New(sharedBackend{b})
				defer holder.Close()
				c := fencelock.New(sharedBackend{b})
				defer c.Close()
				defer b.Close()
				// Hold every kind of hold named k (and k2), so that the
				// call finds its own held.
				bg := context.Background()
				for _, hold := range []func() (*fencelock.Lock, error){
					func() (*fencelock.Lock, error) { return holder.Acquire(bg, "k", time.Minute) },
					func() (*fencelock.Lock, error) { return holder.Acquire(bg, "k2", time.Minute) },
					func() (*fencelock.Lock, error) { return holder.Semaphore("k", 1).Acquire(bg, time.Minute) },
					func() (*fencelock.Lock, error) { return holder.RWLock("k").AcquireWrite(bg, time.Minute) },
					func() (*fencelock.Lock, error) {
						l, err := holder.Campaign(bg, "k", "holder", time.Minute)
						if err != nil {
							return nil, err
						}
						return l.Lock(), nil
					},
				} {
					if _, err := hold(); err != nil {
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithTimeoutCause(context.Background(), 5*time.Second, errShutdown)
				defer cancel()
				err := tc.call(ctx, c, "k")
				for _, want := range []error{context.DeadlineExceeded, errShutdown, fencelock.ErrNotAcquired} {
					if !errors.Is(err, want) {
						t.Errorf("held: %v does not match %v", err, want)
					}
				}

				b.Inject(memorybackend.Fault{Ops: memorybackend.AllOps, Refuse: true})
				ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err = tc.call(ctx, c, "down")
				if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
					t.Errorf("backend down: %v, want DeadlineExceeded and ErrUnavailable, not ErrNotAcquired", err)
				}
			})
		})
	}
}

// sharedBackend lets several Clients use one memory backend, with every
// capability the Clients find by type assertion (it hides Close).
type sharedBackend struct{ *memorybackend.Backend }

func (sharedBackend) Close() error { return nil }

// Against Redis, as users run it: an already-cancelled context on a free
// lock is the caller's, not contention; a deadline that passes while
// another Client holds the lock is.
func TestAcquireEndedContextRedis(t *testing.T) {
	_, rdb := startRedis(t)
	c, other := newClient(t, rdb), newClient(t, rdb)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range acquireCalls() {
		err := tc.call(cancelled, c, "free")
		if !errors.Is(err, context.Canceled) || errors.Is(err, fencelock.ErrNotAcquired) || errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("%s with a cancelled context on a free lock: %v, want context.Canceled only", tc.name, err)
		}
	}
	if keys := rdb.Keys(context.Background(), "lock:{free*").Val(); len(keys) != 0 {
		t.Errorf("calls with a cancelled context reached Redis: %v", keys)
	}
	ctx := ctxTimeout(t, 30*time.Second)
	lk, err := other.Acquire(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	_, err = c.Acquire(ctxTimeout(t, 300*time.Millisecond), "held", time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held lock until the deadline: %v, want DeadlineExceeded and ErrNotAcquired", err)
	}
}
