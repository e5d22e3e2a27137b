package fencelock_test

// Deterministic timing tests of semaphores and read-write locks over the
// memory backend, under testing/synctest: waits, wake-ups, renewals and
// writer intents on the bubble's virtual clock.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// hmSetup makes a memory backend and a Client on it inside the bubble,
// both closed at cleanup.
func hmSetup(t *testing.T, opts ...fencelock.Option) (*memorybackend.Backend, *fencelock.Client) {
	t.Helper()
	b := memorybackend.New()
	c := fencelock.New(b, opts...)
	t.Cleanup(func() { c.Close() })
	return b, c
}

// hmAcquire runs acquire in a goroutine and returns a channel that gets
// its result and the virtual time it took.
type hmResult struct {
	lk   *fencelock.Lock
	err  error
	took time.Duration
}

func hmGo(acquire func() (*fencelock.Lock, error)) <-chan hmResult {
	ch := make(chan hmResult, 1)
	start := time.Now()
	go func() {
		lk, err := acquire()
		ch <- hmResult{lk, err, time.Since(start)}
	}()
	return ch
}

// hmPending reports whether ch has no result yet, once every goroutine of
// the bubble is blocked.
func hmPending(ch <-chan hmResult) bool {
	synctest.Wait()
	select {
	case r := <-ch:
		panic(r) // a test bug: the caller expected it pending
	default:
		return true
	}
}

// A waiter for a permit is woken at once by a release, without waiting
// for a timer; with no release, it takes the permit of a holder whose lease
// ended when it ends.
func TestSemaphoreWaitTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := hmSetup(t)
		ctx := context.Background()
		sem := c.Semaphore("pool", 2)
		a, err := sem.TryAcquire(ctx, 10*time.Second, fencelock.WithAutoRenew(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		b, err := sem.TryAcquire(ctx, 10*time.Second) // not renewed: its lease ends at 10s
		if err != nil {
			t.Fatal(err)
		}
		waiting := hmGo(func() (*fencelock.Lock, error) { return sem.Acquire(ctx, 10*time.Second) })
		hmPending(waiting)
		time.Sleep(time.Second)
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-waiting
		if r.err != nil || r.took != time.Second {
			t.Fatalf("waiter after a release at 1s: %v after %v, want the permit at 1s exactly", r.err, r.took)
		}
		if r.lk.Fence() <= b.Fence() {
			t.Fatalf("fence %d after %d, want it larger", r.lk.Fence(), b.Fence())
		}

		// Both permits held again (b, not renewed, and r.lk): the next
		// waiter gets b's permit when b's lease ends, 10s after it was
		// taken (9s from now), or before, when b is declared lost at its
		// local deadline (the 10% margin) and released in the background.
		start := time.Now()
		next := hmGo(func() (*fencelock.Lock, error) { return sem.Acquire(ctx, 10*time.Second) })
		got := <-next
		if got.err != nil {
			t.Fatal(got.err)
		}
		if took := time.Since(start); took < 8*time.Second-time.Millisecond || took > 9*time.Second {
			t.Fatalf("permit of a lapsed holder taken after %v, want at its lease's end (8s: b's local deadline, at which it is released; 9s at the latest)", took)
		}
		if !errors.Is(b.Err(), fencelock.ErrLost) {
			t.Fatalf("b's Err = %v, want ErrLost", b.Err())
		}
	})
}

// The lease keeper renews permits and read holds like locks: held over
// many ttls, and lost with ErrLost when the server no longer has them.
func TestHoldsRenewedByKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, c := hmSetup(t)
		ctx := context.Background()
		permit, err := c.Semaphore("pool", 1).TryAcquire(ctx, 3*time.Second, fencelock.WithAutoRenew(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		rw := c.RWLock("doc")
		r1, err := rw.TryAcquireRead(ctx, 3*time.Second, fencelock.WithAutoRenew(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := rw.TryAcquireRead(ctx, 3*time.Second, fencelock.WithAutoRenew(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		for name, lk := range map[string]*fencelock.Lock{"permit": permit, "reader 1": r1, "reader 2": r2} {
			if err := lk.Err(); err != nil {
				t.Fatalf("%s after 30s of 3s leases renewed every second: %v", name, err)
			}
		}
		// Readers renew independently: one leaves, the other stays.
		if err := r1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		if err := r2.Err(); err != nil {
			t.Fatalf("reader 2 after reader 1 left: %v", err)
		}
		if st := b.RWState(fencelock.DefaultNamespace, "doc"); len(st.Holds) != 1 {
			t.Fatalf("server holds %v, want reader 2's only", st.Holds)
		}
		if st := b.SemaphoreState(fencelock.DefaultNamespace, "pool"); len(st.Holds) != 1 {
			t.Fatalf("server permits %v, want one", st.Holds)
		}

		// The server loses the permit (a restart without persistence): the
		// next renewal finds it gone.
		b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Refuse: true})
		time.Sleep(10 * time.Second)
		if !errors.Is(permit.Err(), fencelock.ErrLost) || !errors.Is(r2.Err(), fencelock.ErrLost) {
			t.Fatalf("after renewals failed past the lease: permit %v, reader %v; want ErrLost", permit.Err(), r2.Err())
		}
	})
}

// A waiting writer keeps its intent alive however long it waits, so new
// readers stay out; it withdraws the intent at once when it gives up.
func TestWriterIntentTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, c := hmSetup(t)
		ctx := context.Background()
		rw := c.RWLock("doc")
		reader, err := rw.TryAcquireRead(ctx, 30*time.Second, fencelock.WithAutoRenew(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		writer := hmGo(func() (*fencelock.Lock, error) { return rw.AcquireWrite(wctx, 10*time.Second) })
		hmPending(writer)
		for range 10 { // 15s: many intent leases
			time.Sleep(1500 * time.Millisecond)
			if _, err := rw.TryAcquireRead(ctx, time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
				t.Fatalf("new reader while a writer waits: %v, want ErrNotAcquired", err)
			}
		}
		if st := b.RWState(fencelock.DefaultNamespace, "doc"); len(st.Intents) != 1 {
			t.Fatalf("intents on the server after 15s of waiting: %v, want the writer's", st.Intents)
		}
		// The writer gives up at 20s: its intent goes at once.
		r := <-writer
		if !errors.Is(r.err, fencelock.ErrNotAcquired) || !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("writer = %v, want ErrNotAcquired and DeadlineExceeded", r.err)
		}
		synctest.Wait()
		if st := b.RWState(fencelock.DefaultNamespace, "doc"); len(st.Intents) != 0 {
			t.Fatalf("intents after the writer gave up: %v, want none", st.Intents)
		}
		if _, err := rw.TryAcquireRead(ctx, time.Second); err != nil {
			t.Fatalf("new reader after the writer gave up: %v", err)
		}
		if err := reader.Err(); err != nil {
			t.Fatalf("the first reader: %v", err)
		}
	})
}

// A writer that stopped renewing (its process was killed right after its
// last renewal) keeps readers out until its lease ends, and no longer:
// the waiting reader gets in when it ends, also while another Client's
// reader polls with single attempts all along (which get in then too).
func TestRWKilledWriterTiming(t *testing.T) {
	for _, poll := range []bool{false, true} {
		t.Run(map[bool]string{false: "waiting-reader", true: "with-a-polling-reader"}[poll], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, c := hmSetup(t)
				other := fencelock.New(b)
				t.Cleanup(func() { other.Close() })
				ctx := context.Background()
				const lease = 2 * time.Second
				w, err := b.Acquire(ctx, driver.Request{
					Ref:   driver.Ref{Kind: driver.KindWrite, Namespace: fencelock.DefaultNamespace, Key: "doc", Token: "killed-writer"},
					Owner: "killed-writer", TTL: lease})
				if err != nil || !w.Acquired {
					t.Fatalf("the writer's hold: %+v, %v", w, err)
				}
				reader := hmGo(func() (*fencelock.Lock, error) { return c.RWLock("doc").AcquireRead(ctx, 10*time.Second) })
				polled := hmGo(func() (*fencelock.Lock, error) {
					for poll {
						lk, err := other.RWLock("doc").TryAcquireRead(ctx, 10*time.Second)
						if !errors.Is(err, fencelock.ErrNotAcquired) {
							return lk, err
						}
						time.Sleep(10 * time.Millisecond)
					}
					return nil, nil
				})
				r := <-reader
				if r.err != nil || r.took != lease {
					t.Fatalf("waiting reader: %v after %v, want the lock at %v, when the writer's lease ended", r.err, r.took, lease)
				}
				if r.lk.Fence() <= w.Fence {
					t.Errorf("reader's fence %d, want above the writer's %d", r.lk.Fence(), w.Fence)
				}
				if p := <-polled; p.err != nil || poll && p.took > lease+10*time.Millisecond {
					t.Fatalf("polling reader: %v after %v, want the lock by the poll after %v", p.err, p.took, lease)
				}
			})
		})
	}
}

// The writer gets the lock the moment the last reader releases; readers
// waiting behind it get theirs the moment it releases, before a second
// writer that waits too (the readers' turn), which gets the lock when they
// release.
func TestRWHandOverTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := hmSetup(t)
		ctx := context.Background()
		rw := c.RWLock("doc")
		r1, err := rw.TryAcquireRead(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := rw.TryAcquireRead(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		writer := hmGo(func() (*fencelock.Lock, error) { return rw.AcquireWrite(ctx, 30*time.Second) })
		hmPending(writer)
		reader := hmGo(func() (*fencelock.Lock, error) { return rw.AcquireRead(ctx, 30*time.Second) })
		hmPending(reader)
		time.Sleep(time.Second)
		r1.Release(ctx)
		hmPending(writer) // r2 still holds
		time.Sleep(time.Second)
		r2.Release(ctx)
		w := <-writer
		if w.err != nil || w.took != 2*time.Second {
			t.Fatalf("writer: %v after %v, want the lock at 2s, when the last reader left", w.err, w.took)
		}
		hmPending(reader) // the writer holds
		writer2 := hmGo(func() (*fencelock.Lock, error) { return rw.AcquireWrite(ctx, 30*time.Second) })
		hmPending(writer2)
		time.Sleep(time.Second)
		w.lk.Release(ctx)
		r := <-reader
		if r.err != nil || r.took != 3*time.Second {
			t.Fatalf("reader: %v after %v, want the lock at 3s, when the writer left", r.err, r.took)
		}
		hmPending(writer2) // the admitted reader holds
		time.Sleep(time.Second)
		r.lk.Release(ctx)
		w2 := <-writer2
		if w2.err != nil || w2.took != 2*time.Second {
			t.Fatalf("second writer: %v after %v, want the lock at 4s, when the admitted reader left", w2.err, w2.took)
		}
		if !(r1.Fence() < r2.Fence() && r2.Fence() < w.lk.Fence() && w.lk.Fence() < r.lk.Fence() && r.lk.Fence() < w2.lk.Fence()) {
			t.Fatalf("fences %d %d %d %d %d, want increasing in acquisition order", r1.Fence(), r2.Fence(), w.lk.Fence(), r.lk.Fence(), w2.lk.Fence())
		}
	})
}

// Bad input gets an error naming it; a backend without the capability
// gets ErrUnsupported naming it.
func TestHoldsBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := hmSetup(t)
		ctx := context.Background()
		cases := []struct {
			name string
			call func() error
			want string
		}{
			{"zero permits", func() error { _, err := c.Semaphore("s", 0).TryAcquire(ctx, time.Second); return err }, "semaphore permits 0"},
			{"negative permits", func() error { _, err := c.Semaphore("s", -2).Acquire(ctx, time.Second); return err }, "semaphore permits -2"},
			{"empty semaphore name", func() error { _, err := c.Semaphore("", 1).TryAcquire(ctx, time.Second); return err }, `key ""`},
			{"semaphore ttl", func() error { _, err := c.Semaphore("s", 1).TryAcquire(ctx, 0); return err }, "ttl 0s"},
			{"empty rwlock name", func() error { _, err := c.RWLock("").AcquireRead(ctx, time.Second); return err }, `key ""`},
			{"rwlock ttl", func() error { _, err := c.RWLock("x").AcquireWrite(ctx, -time.Second); return err }, "ttl -1s"},
			{"fairness", func() error {
				_, err := c.RWLock("x").AcquireWrite(ctx, time.Second, fencelock.WithFairness())
				return err
			}, "WithFairness"},
			{"renew interval", func() error {
				_, err := c.Semaphore("s", 1).TryAcquire(ctx, time.Second, fencelock.WithAutoRenew(time.Second))
				return err
			}, "WithAutoRenew interval 1s"},
		}
		for _, tc := range cases {
			err := tc.call()
			if !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want ErrInvalidArgument naming %q", tc.name, err, tc.want)
			}
		}

		plain := fencelock.New(locksOnly{memorybackend.New()})
		defer plain.Close()
		if _, err := plain.Semaphore("s", 1).TryAcquire(ctx, time.Second); !errors.Is(err, fencelock.ErrUnsupported) || !strings.Contains(err.Error(), "semaphores") {
			t.Errorf("semaphore on a store without them: %v, want ErrUnsupported naming them", err)
		}
		if _, err := plain.RWLock("x").AcquireRead(ctx, time.Second); !errors.Is(err, fencelock.ErrUnsupported) || !strings.Contains(err.Error(), "read-write locks") {
			t.Errorf("rwlock on a store without them: %v, want ErrUnsupported naming them", err)
		}
		var nilClient *fencelock.Client
		if _, err := nilClient.Semaphore("s", 1).Acquire(ctx, time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("semaphore of a nil Client: %v, want ErrInvalidArgument", err)
		}
		if _, err := nilClient.RWLock("x").TryAcquireWrite(ctx, time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("rwlock of a nil Client: %v, want ErrInvalidArgument", err)
		}
	})
}

// Close releases the permits and read and write holds the Client still
// has, on the server, like its locks; they end with ErrReleased and
// ErrClosed.
func TestHoldsReleasedByClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		c := fencelock.New(b)
		ctx := context.Background()
		permit, err := c.Semaphore("pool", 3).TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		reader, err := c.RWLock("doc").TryAcquireRead(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		writer, err := c.RWLock("other").TryAcquireWrite(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for name, lk := range map[string]*fencelock.Lock{"permit": permit, "reader": reader, "writer": writer} {
			if err := lk.Err(); !errors.Is(err, fencelock.ErrReleased) || !errors.Is(err, fencelock.ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrReleased and ErrClosed", name, err)
			}
		}
		if st := b.SemaphoreState(fencelock.DefaultNamespace, "pool"); len(st.Holds) != 0 {
			t.Errorf("permits on the server after Close: %v", st.Holds)
		}
		for _, key := range []string{"doc", "other"} {
			if st := b.RWState(fencelock.DefaultNamespace, key); len(st.Holds) != 0 {
				t.Errorf("holds of %s on the server after Close: %v", key, st.Holds)
			}
		}
		if _, err := c.Semaphore("pool", 3).TryAcquire(ctx, time.Minute); !errors.Is(err, fencelock.ErrClosed) {
			t.Errorf("acquire after Close: %v, want ErrClosed", err)
		}
	})
}

// An acquire whose reply is lost leaves no permit behind: a TryAcquire
// releases it in the background (with a tombstone against a late copy),
// and a waiting Acquire completes it with its next attempt (the same
// token: one permit, not two).
func TestPermitReplyLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, c := hmSetup(t)
		ctx := context.Background()
		sem := c.Semaphore("pool", 2)

		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, LoseReply: true})
		if _, err := sem.TryAcquire(ctx, time.Minute); !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("TryAcquire whose reply was lost: %v, want ErrUnavailable", err)
		}
		time.Sleep(time.Second) // the background release
		if st := b.SemaphoreState(fencelock.DefaultNamespace, "pool"); len(st.Holds) != 0 {
			t.Fatalf("permits left after a lost reply: %v, want none", st.Holds)
		}

		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, LoseReply: true})
		lk, err := sem.Acquire(ctx, time.Minute, fencelock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("Acquire after a lost reply: %v", err)
		}
		st := b.SemaphoreState(fencelock.DefaultNamespace, "pool")
		if len(st.Holds) != 1 || st.Fences[lk.Token()] != lk.Fence() {
			t.Fatalf("server permits %v (fences %v), want only the Acquire's, fence %d", st.Holds, st.Fences, lk.Fence())
		}
	})
}
