package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// Two callers that list the same keys in opposite orders never deadlock:
// AcquireAll takes keys in sorted order. Each gets all its locks in turn,
// with every key's fence rising.
func TestAcquireAllNoDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		a, b := e.client("a"), e.client("b")
		ctx := context.Background()
		var wg sync.WaitGroup
		var mu sync.Mutex
		last := map[string]int64{}
		run := func(c *fencelock.Client, keys []string) {
			for range 20 {
				m, err := c.AcquireAll(ctx, keys, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, lk := range m.Locks() {
					k, f := lk.Key(), lk.Fence()
					if f <= last[k] {
						t.Errorf("fence of %s went from %d to %d", k, last[k], f)
					}
					last[k] = f
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				if err := m.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}
		wg.Go(func() { run(a, []string{"x", "y", "z"}) })
		wg.Go(func() { run(b, []string{"z", "y", "x"}) })
		wg.Wait()
	})
}

// All or nothing: when one key cannot be had, the keys already taken are
// released before AcquireAll returns that key's error.
func TestAcquireAllAllOrNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		holder, c := e.client("h"), e.client("c")
		ctx := context.Background()
		if _, err := holder.Acquire(ctx, "b", time.Hour); err != nil {
			t.Fatal(err)
		}
		// WithWait(0): one attempt per key, refused at once at b.
		start := time.Now()
		_, err := c.AcquireAll(ctx, []string{"c", "b", "a"}, time.Minute, fencelock.WithWait(0))
		if !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("AcquireAll WithWait(0) with b held: %v, want ErrNotAcquired", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("AcquireAll WithWait(0) with b held waited %v", d)
		}
		if st := e.state("a"); st.Owner != "" {
			t.Fatalf("a was left held by %q after AcquireAll WithWait(0) failed", st.Owner)
		}
		// WithWait bounds the whole call: a, then b for the rest of it.
		start = time.Now()
		_, err = c.AcquireAll(ctx, []string{"a", "b"}, time.Minute, fencelock.WithWait(3*time.Second))
		if !errors.Is(err, fencelock.ErrNotAcquired) || time.Since(start) != 3*time.Second {
			t.Fatalf("AcquireAll with b held and a 3s wait: %v after %v", err, time.Since(start))
		}
		if st := e.state("a"); st.Owner != "" {
			t.Fatalf("a was left held by %q after AcquireAll gave up", st.Owner)
		}
	})
}

// The MultiLock ends when its first lock is lost: Done closes, Err matches
// ErrLost, DoAll's context is cancelled with that cause and its error
// matches ErrLost.
func TestMultiLockLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("c")
		ctx := context.Background()
		err := c.DoAll(ctx, []string{"a", "b"}, 30*time.Second, func(ctx context.Context, m *fencelock.MultiLock) error {
			e.b.Delete(tmNS, "b") // the lock is taken away behind the holder's back
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), fencelock.ErrLost) {
				t.Errorf("fn's context cause %v, want ErrLost", context.Cause(ctx))
			}
			select {
			case <-m.Done():
			default:
				t.Error("Done is open after a lock was lost")
			}
			if !errors.Is(m.Err(), fencelock.ErrLost) || m.Held() {
				t.Errorf("Err %v, Held %v after a loss", m.Err(), m.Held())
			}
			return nil
		})
		if !errors.Is(err, fencelock.ErrLost) {
			t.Fatalf("DoAll after a loss: %v, want ErrLost", err)
		}
		if st := e.state("a"); st.Owner != "" {
			t.Fatalf("a still held by %q after DoAll returned", st.Owner)
		}
	})
}

// A lock taken away while fn runs, which only the release finds gone:
// fn's work may have overlapped with another holder's, so DoAll's error
// matches ErrLost, as Do's does (not only ErrNotHeld, the release's).
func TestDoAllLossFoundByRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("c")
		ctx := context.Background()
		err := c.DoAll(ctx, []string{"a", "b"}, 30*time.Second, func(ctx context.Context, m *fencelock.MultiLock) error {
			e.b.Delete(tmNS, "b") // behind the holder's back; no renewal is due before fn returns
			return nil
		})
		if !errors.Is(err, fencelock.ErrLost) {
			t.Fatalf("DoAll whose release found a lock gone: %v, want ErrLost", err)
		}
		if st := e.state("a"); st.Owner != "" {
			t.Fatalf("a still held by %q after DoAll returned", st.Owner)
		}
		// Do, the same way.
		err = c.Do(ctx, "d", 30*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
			e.b.Delete(tmNS, "d")
			return nil
		})
		if !errors.Is(err, fencelock.ErrLost) {
			t.Fatalf("Do whose release found the lock gone: %v, want ErrLost", err)
		}
	})
}

// Bad input is refused, naming it, before anything is sent.
func TestAcquireAllBadInput(t *testing.T) {
	b := memorybackend.New()
	c := fencelock.New(struct{ driver.Store }{b})
	defer b.Close()
	defer c.Close()
	ctx := context.Background()
	for _, keys := range [][]string{nil, {"a", ""}, {"a", "b", "a"}} {
		if _, err := c.AcquireAll(ctx, keys, time.Minute); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("AcquireAll(%q): %v, want ErrInvalidArgument", keys, err)
		}
	}
	if n := b.Calls(memorybackend.Acquire).Attempted; n != 0 {
		t.Fatalf("%d acquire attempts for bad input", n)
	}
	var m *fencelock.MultiLock
	if m.Release(ctx) == nil || m.Err() == nil || m.Held() || m.Locks() != nil {
		t.Fatal("a nil *MultiLock must report errors, not panic")
	}
}
