package fencelock_test

// Tests of Hooks (observer.go): deterministic ones over the memory backend
// under testing/synctest, where every duration a hook reports is exact, and
// one against a real redis-server.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// hookLog records the events of a Client's hooks as lines, each stamped
// with the virtual time since start (synctest) or without time (real
// server: stamp is nil).
type hookLog struct {
	stamp func() time.Duration
	mu    sync.Mutex
	lines []string
}

func (h *hookLog) add(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if h.stamp != nil {
		line = fmt.Sprintf("%v %s", h.stamp(), line)
	}
	h.mu.Lock()
	h.lines = append(h.lines, line)
	h.mu.Unlock()
}

// take returns the lines recorded since the last take.
func (h *hookLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	lines := h.lines
	h.lines = nil
	return lines
}

// hooks returns Hooks that record every event. Errors are left out (their
// text is checked through the outcome).
func (h *hookLog) hooks() fencelock.Hooks {
	return fencelock.Hooks{
		AcquireDone: func(_ context.Context, e fencelock.AcquireEvent) {
			if (e.Err == nil) != (e.Outcome == "acquired") {
				h.add("BAD acquire %s: outcome %v with error %v", e.Key, e.Outcome, e.Err)
			}
			h.add("acquire %s %v %v wait=%v attempts=%d fence=%d", e.Key, e.Kind, e.Outcome, e.Wait, e.Attempts, e.Fence)
		},
		WaitStart: func(_ context.Context, e fencelock.WaitEvent) { h.add("wait %s %v", e.Key, e.Kind) },
		WaitDone:  func(_ context.Context, e fencelock.WaitEvent) { h.add("waited %s %v %v", e.Key, e.Kind, e.Waited) },
		Released: func(_ context.Context, e fencelock.ReleaseEvent) {
			h.add("released %s %v fence=%d held=%v", e.Key, e.Kind, e.Fence, e.Held)
		},
		Lost: func(e fencelock.LostEvent) {
			h.add("lost %s %v fence=%d %v held=%v", e.Key, e.Kind, e.Fence, e.Reason, e.Held)
		},
		RenewalDone: func(e fencelock.RenewalEvent) {
			h.add("renewed locks=%d failed=%d gone=%d in %v", e.Locks, e.Failed, e.Gone, e.Duration)
		},
	}
}

// obsShared hides the memory backend's Close from a Client, so that several
// Clients can share it, with every capability (semaphores, read-write
// locks, release notifications) visible.
type obsShared struct{ *memorybackend.Backend }

func (obsShared) Close() error { return nil }

// obsEnv is a synctest bubble's memory backend, with Clients on it.
type obsEnv struct {
	t     *testing.T
	b     *memorybackend.Backend
	start time.Time
}

func newObsEnv(t *testing.T) *obsEnv {
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	return &obsEnv{t: t, b: b, start: time.Now()}
}

func (e *obsEnv) now() time.Duration { return time.Since(e.start) }

// client returns a Client on the backend, closed at cleanup, with tokens
// name1, name2, ...
func (e *obsEnv) client(name string, opts ...fencelock.Option) *fencelock.Client {
	var n atomic.Int64
	gen := fencelock.WithTokenGenerator(func() (string, error) { return fmt.Sprintf("%s%d", name, n.Add(1)), nil })
	c := fencelock.New(obsShared{e.b}, append([]fencelock.Option{gen}, opts...)...)
	e.t.Cleanup(func() { c.Close() })
	return c
}

// log returns a hookLog stamped with the bubble's time.
func (e *obsEnv) log() *hookLog { return &hookLog{stamp: e.now} }

// obsFixedBackoff is a fallback timer without jitter, for exact times.
type obsFixedBackoff time.Duration

func (d obsFixedBackoff) Backoff(int) time.Duration { return time.Duration(d) }

func checkLines(t *testing.T, step string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: events\n\t%s\nwant\n\t%s", step, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestHooksSequence follows one Client through acquires of every outcome,
// a wait, renewals, a release, losses of every reason and Close, and
// checks the events its hooks get, in order, with exact durations.
func TestHooksSequence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newObsEnv(t)
		rec := e.log()
		c := e.client("a", fencelock.WithHooks(rec.hooks()))
		other := e.client("b")
		ctx := context.Background()

		// Uncontended: no wait, one attempt.
		time.Sleep(10 * time.Millisecond)
		k, err := c.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		checkLines(t, "TryAcquire", rec.take(), "10ms acquire k lock acquired wait=0s attempts=1 fence=1")

		// Held by the other Client: not acquired, once; then invalid (no attempt).
		held, err := other.TryAcquire(ctx, "w", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, "w", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held lock: %v", err)
		}
		if _, err := c.TryAcquire(ctx, "w", 0); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Fatalf("TryAcquire with ttl 0: %v", err)
		}
		checkLines(t, "refused", rec.take(),
			"10ms acquire w lock not_acquired wait=0s attempts=1 fence=0",
			"10ms acquire w lock invalid wait=0s attempts=0 fence=0")

		// A wait: the release 300ms later wakes the waiter at once (the
		// fallback timer is longer). Its attempts: the first, one after
		// subscribing, one after the wake-up.
		done := make(chan *fencelock.Lock)
		go func() {
			lk, err := c.Acquire(ctx, "w", time.Second, fencelock.WithWait(time.Second), fencelock.WithRetry(obsFixedBackoff(time.Second)))
			if err != nil {
				t.Error(err)
			}
			done <- lk
		}()
		synctest.Wait()
		checkLines(t, "waiting", rec.take(), "10ms wait w lock")
		time.Sleep(300 * time.Millisecond)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w := <-done
		checkLines(t, "waited", rec.take(),
			"310ms waited w lock 300ms",
			"310ms acquire w lock acquired wait=300ms attempts=3 fence=2")

		// Release: held from the sending of the acquiring request.
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		checkLines(t, "Release", rec.take(), "310ms released k lock fence=1 held=300ms")

		// The deadline passes without renewal: lost at ttl less the 10% margin.
		time.Sleep(time.Second)
		synctest.Wait()
		checkLines(t, "deadline", rec.take(), "1.21s lost w lock fence=2 deadline held=900ms")

		// Renewals every 100ms, each batch answered after 20ms (the event
		// comes with the answer); the hold is deleted on the server at
		// 1.56s and the renewal sent at 1.61s finds it gone. (Fences rise
		// across keys: the Client's fence floor.)
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, ReplyDelay: 20 * time.Millisecond})
		r, err := c.Acquire(ctx, "r", time.Second, fencelock.WithAutoRenew(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
		e.b.Delete(fencelock.DefaultNamespace, "r")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		checkLines(t, "renewals", rec.take(),
			"1.31s acquire r lock acquired wait=0s attempts=1 fence=3",
			"1.43s renewed locks=1 failed=0 gone=0 in 20ms",
			"1.53s renewed locks=1 failed=0 gone=0 in 20ms",
			"1.63s renewed locks=1 failed=0 gone=1 in 20ms",
			"1.63s lost r lock fence=3 gone held=320ms")
		if !errors.Is(r.Err(), fencelock.ErrLost) {
			t.Errorf("r.Err() = %v, want ErrLost", r.Err())
		}

		// A renewal that fails (refused: no time passes) is retried a
		// quarter interval later; WithMaxHold ends the lock 250ms after
		// it was acquired, whatever the renewals.
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 1, Refuse: true})
		_, err = c.Acquire(ctx, "m", time.Second, fencelock.WithAutoRenew(100*time.Millisecond), fencelock.WithMaxHold(250*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		checkLines(t, "max hold", rec.take(),
			"1.66s acquire m lock acquired wait=0s attempts=1 fence=4",
			"1.76s renewed locks=1 failed=1 gone=0 in 0s",
			"1.805s renewed locks=1 failed=0 gone=0 in 20ms",
			"1.905s renewed locks=1 failed=0 gone=0 in 20ms",
			"1.91s lost m lock fence=4 max_hold held=250ms")

		// The backend refuses: unavailable after WithMaxFailures attempts.
		clearRefuse := e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
		_, err = c.Acquire(ctx, "u", time.Second, fencelock.WithMaxFailures(2), fencelock.WithRetry(obsFixedBackoff(50*time.Millisecond)))
		if !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("Acquire during an outage: %v", err)
		}
		clearRefuse()
		checkLines(t, "unavailable", rec.take(),
			"2.66s wait u lock",
			"2.71s waited u lock 50ms",
			"2.71s acquire u lock unavailable wait=50ms attempts=2 fence=0")

		// Semaphore and read-write holds carry their kind.
		p, err := c.Semaphore("s", 2).TryAcquire(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := c.RWLock("rw").TryAcquireRead(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.RWLock("rw").TryAcquireWrite(ctx, time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("TryAcquireWrite while read: %v", err)
		}
		if _, err := c.Semaphore("s", 0).TryAcquire(ctx, time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Fatalf("Semaphore with 0 permits: %v", err)
		}
		time.Sleep(40 * time.Millisecond)
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		checkLines(t, "kinds", rec.take(),
			"2.71s acquire s semaphore acquired wait=0s attempts=1 fence=5",
			"2.71s acquire rw read acquired wait=0s attempts=1 fence=6",
			"2.71s acquire rw write not_acquired wait=0s attempts=1 fence=0",
			"2.71s acquire s semaphore invalid wait=0s attempts=0 fence=0",
			"2.75s released s semaphore fence=5 held=40ms")

		// Close ends a wait (closed) and releases what is held.
		blocker, err := other.TryAcquire(ctx, "c", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer blocker.Release(ctx)
		closed := make(chan error)
		go func() {
			_, err := c.Acquire(ctx, "c", time.Second, fencelock.WithRetry(obsFixedBackoff(time.Second)))
			closed <- err
		}()
		synctest.Wait()
		time.Sleep(10 * time.Millisecond)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-closed; !errors.Is(err, fencelock.ErrClosed) {
			t.Fatalf("Acquire ended by Close: %v", err)
		}
		if _, err := c.TryAcquire(ctx, "x", time.Second); !errors.Is(err, fencelock.ErrClosed) {
			t.Fatalf("TryAcquire after Close: %v", err)
		}
		checkLines(t, "Close", rec.take(),
			"2.75s wait c lock",
			"2.76s waited c lock 10ms",
			"2.76s acquire c lock closed wait=10ms attempts=2 fence=0",
			"2.76s released rw read fence=6 held=50ms",
			"2.76s acquire x lock closed wait=0s attempts=0 fence=0")
		_ = rd
		_ = w
	})
}

// TestHooksMerged checks that the hooks of several WithHooks options are
// all called, in the order given, and that nil fields are skipped.
func TestHooksMerged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newObsEnv(t)
		var order []string
		first := fencelock.Hooks{
			AcquireDone: func(context.Context, fencelock.AcquireEvent) { order = append(order, "first acquire") },
		}
		second := fencelock.Hooks{
			AcquireDone: func(context.Context, fencelock.AcquireEvent) { order = append(order, "second acquire") },
			Released:    func(context.Context, fencelock.ReleaseEvent) { order = append(order, "second released") },
		}
		c := e.client("a", fencelock.WithHooks(first), fencelock.WithHooks(fencelock.Hooks{}), fencelock.WithHooks(second))
		lk, err := c.TryAcquire(context.Background(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := []string{"first acquire", "second acquire", "second released"}
		if !slices.Equal(order, want) {
			t.Errorf("hooks called: %q, want %q", order, want)
		}
	})
}

// TestHooksContext checks that the hooks of a call get the call's
// context: the acquire's (also when refused, and for its wait) and the
// release's.
func TestHooksContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newObsEnv(t)
		type callKey struct{}
		var got []string
		name := func(ctx context.Context) string { s, _ := ctx.Value(callKey{}).(string); return s }
		c := e.client("a", fencelock.WithHooks(fencelock.Hooks{
			AcquireDone: func(ctx context.Context, ev fencelock.AcquireEvent) {
				got = append(got, "acquire "+ev.Outcome+" in "+name(ctx))
			},
			WaitStart: func(ctx context.Context, _ fencelock.WaitEvent) { got = append(got, "wait in "+name(ctx)) },
			WaitDone:  func(ctx context.Context, _ fencelock.WaitEvent) { got = append(got, "waited in "+name(ctx)) },
			Released:  func(ctx context.Context, _ fencelock.ReleaseEvent) { got = append(got, "released in "+name(ctx)) },
		}))
		call := func(n string) context.Context { return context.WithValue(context.Background(), callKey{}, n) }
		lk, err := c.TryAcquire(call("first"), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(call("bad"), "k", -1); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Fatalf("TryAcquire with a negative ttl: %v", err)
		}
		if _, err := c.Acquire(call("second"), "k", time.Second, fencelock.WithWait(100*time.Millisecond)); !errors.Is(err, fencelock.ErrNotAcquired) {
			t.Fatalf("Acquire of a held lock: %v", err)
		}
		if err := lk.Release(call("release")); err != nil {
			t.Fatal(err)
		}
		want := []string{"acquire acquired in first", "acquire invalid in bad", "wait in second", "waited in second",
			"acquire not_acquired in second", "released in release"}
		if !slices.Equal(got, want) {
			t.Errorf("hooks called: %q, want %q", got, want)
		}
	})
}

// TestHooksNoAllocations checks that hooks cost no allocation on the
// uncontended path (TryAcquire, Release): a Client with every hook set
// allocates exactly as much as one without, so the unset path, a nil
// check, adds none either. (The first measurement of a process counts
// one-time growth and is left out; the least of three counts, since the
// Clients' goroutines may allocate meanwhile.)
func TestHooksNoAllocations(t *testing.T) {
	b := memorybackend.New()
	defer b.Close()
	allocs := func(opts ...fencelock.Option) float64 {
		c := fencelock.New(obsShared{b}, opts...)
		defer c.Close()
		ctx := context.Background()
		return testing.AllocsPerRun(500, func() {
			lk, err := c.TryAcquire(ctx, "k", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	var acquired, released atomic.Int64
	hooks := fencelock.WithHooks(fencelock.Hooks{
		AcquireStart:  func(ctx context.Context, _ fencelock.AcquireEvent) context.Context { return ctx },
		ForceReleased: func(context.Context, fencelock.ReleaseEvent) {},
		AcquireDone:   func(context.Context, fencelock.AcquireEvent) { acquired.Add(1) },
		WaitStart:     func(context.Context, fencelock.WaitEvent) {},
		WaitDone:      func(context.Context, fencelock.WaitEvent) {},
		Released:      func(context.Context, fencelock.ReleaseEvent) { released.Add(1) },
		Lost:          func(fencelock.LostEvent) {},
		RenewalDone:   func(fencelock.RenewalEvent) {},
	})
	allocs() // warm-up
	without, with := math.Inf(1), math.Inf(1)
	for range 3 {
		without = min(without, allocs())
		with = min(with, allocs(hooks))
	}
	t.Logf("allocations per TryAcquire+Release: %.0f without hooks, %.0f with every hook set", without, with)
	if with != without {
		t.Errorf("allocations per TryAcquire+Release: %.0f with hooks, %.0f without", with, without)
	}
	if acquired.Load() == 0 || acquired.Load() != released.Load() {
		t.Errorf("hooks saw %d acquisitions and %d releases", acquired.Load(), released.Load())
	}
}

// TestHooksRedis runs workers of two Clients against a real redis-server:
// contended acquires (waits), Do with renewals, a lock forcibly released
// so that its renewal finds it gone, a semaphore and an RWLock. After
// Close, the hooks' books balance: every acquired lock was released or
// lost once, every wait ended, and the events carry the right kinds.
func TestHooksRedis(t *testing.T) {
	_, rdb := startRedis(t)
	type tally struct {
		mu                         sync.Mutex
		acquired, released, lost   map[string]int // by kind
		outcomes                   map[string]int
		waits, waitsDone, renewals int
		lostReasons                map[string]int
		fences                     map[string][]int64 // acquired fences by key, in order
	}
	tl := &tally{acquired: map[string]int{}, released: map[string]int{}, lost: map[string]int{},
		outcomes: map[string]int{}, lostReasons: map[string]int{}, fences: map[string][]int64{}}
	hooks := fencelock.Hooks{
		AcquireDone: func(_ context.Context, e fencelock.AcquireEvent) {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.outcomes[e.Outcome]++
			if e.Outcome == "acquired" {
				tl.acquired[e.Kind.String()]++
				tl.fences[e.Key] = append(tl.fences[e.Key], e.Fence)
			}
		},
		WaitStart: func(context.Context, fencelock.WaitEvent) { tl.mu.Lock(); tl.waits++; tl.mu.Unlock() },
		WaitDone:  func(context.Context, fencelock.WaitEvent) { tl.mu.Lock(); tl.waitsDone++; tl.mu.Unlock() },
		Released: func(_ context.Context, e fencelock.ReleaseEvent) {
			tl.mu.Lock()
			tl.released[e.Kind.String()]++
			tl.mu.Unlock()
		},
		Lost: func(e fencelock.LostEvent) {
			tl.mu.Lock()
			tl.lost[e.Kind.String()]++
			tl.lostReasons[e.Reason]++
			tl.mu.Unlock()
		},
		RenewalDone: func(e fencelock.RenewalEvent) { tl.mu.Lock(); tl.renewals += e.Locks; tl.mu.Unlock() },
	}
	c1 := newClient(t, rdb, fencelock.WithHooks(hooks), fencelock.WithNamespace("hooks"))
	c2 := newClient(t, rdb, fencelock.WithHooks(hooks), fencelock.WithNamespace("hooks"))
	ctx := ctxTimeout(t, time.Minute)

	// Contention: 4 workers, 2 per Client, 5 turns each at one key, each
	// turn a Do of 20ms that renews every 10ms (a lease of seconds, so
	// that no lock is lost on a busy machine).
	var wg sync.WaitGroup
	for i := range 4 {
		c := []*fencelock.Client{c1, c2}[i%2]
		wg.Go(func() {
			for range 5 {
				err := c.Do(ctx, "shared", 3*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
					time.Sleep(20 * time.Millisecond)
					return nil
				}, fencelock.WithAutoRenew(10*time.Millisecond), fencelock.WithWait(30*time.Second))
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()

	// A lock taken from its holder: the next renewal finds it gone.
	lk, err := c1.Acquire(ctx, "taken", 10*time.Second, fencelock.WithAutoRenew(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.ForceRelease(ctx, "taken", "TestHooksRedis"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, lk.Done(), 10*time.Second, "loss of the forcibly released lock")

	// A permit, a read hold, and a write that must wait for the reader.
	p, err := c1.Semaphore("sem", 1).Acquire(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := c1.RWLock("rw").AcquireRead(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		rd.Release(ctx)
	}()
	wr, err := c2.RWLock("rw").AcquireWrite(ctx, 30*time.Second, fencelock.WithWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = p
	_ = wr // p and wr are released by Close
	if _, err := c2.TryAcquire(ctx, "", time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
		t.Fatalf("TryAcquire with an empty key: %v", err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}

	tl.mu.Lock()
	defer tl.mu.Unlock()
	for kind, n := range map[string]int{"lock": 21, "semaphore": 1, "read": 1, "write": 1} {
		if tl.acquired[kind] != n {
			t.Errorf("%s: %d acquired, want %d", kind, tl.acquired[kind], n)
		}
		if got := tl.released[kind] + tl.lost[kind]; got != tl.acquired[kind] {
			t.Errorf("%s: %d acquired, but %d released and %d lost", kind, tl.acquired[kind], tl.released[kind], tl.lost[kind])
		}
	}
	if tl.lost["lock"] != 1 || tl.lostReasons["gone"] != 1 {
		t.Errorf("losses %v by reason %v, want the forcibly released lock, gone", tl.lost, tl.lostReasons)
	}
	if tl.waits == 0 || tl.waits != tl.waitsDone {
		t.Errorf("%d waits began and %d ended: want as many, at least one (4 workers at one key, a writer behind a reader)", tl.waits, tl.waitsDone)
	}
	if tl.outcomes["invalid"] != 1 || tl.outcomes["acquired"] != 24 || len(tl.outcomes) != 2 {
		t.Errorf("outcomes %v, want 24 acquired and 1 invalid", tl.outcomes)
	}
	if tl.renewals == 0 {
		t.Error("no renewal reported, though each Do renews every 10ms for 20ms")
	}
	if f := tl.fences["shared"]; len(f) != 20 || !slices.IsSorted(f) {
		t.Errorf("fences of the shared key in the order reported: %v, want 20 increasing", f)
	}
}

// A renewal still in flight when Close stops the lease keeper (Close has
// released the lock, without waiting for the renewal, and then cancels
// it) ends because Close cancelled it: RenewalDone does not count it as a
// failure.
func TestHooksRenewalCancelledByClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newObsEnv(t)
		h := e.log()
		c := e.client("a", fencelock.WithHooks(h.hooks()))
		if _, err := c.Acquire(context.Background(), "k", 10*time.Second, fencelock.WithAutoRenew(time.Second)); err != nil {
			t.Fatal(err)
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, ReplyDelay: time.Hour})
		time.Sleep(1100 * time.Millisecond) // the first renewal, at 1s, waits for its reply
		synctest.Wait()
		h.take()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		checkLines(t, "Close", h.take(),
			"1.1s released k lock fence=1 held=1.1s",
			"1.1s renewed locks=1 failed=0 gone=0 in 100ms")
	})
}
