package fencelock_test

// Deterministic timing tests of the Client over memorybackend,
// under testing/synctest: time is virtual inside each bubble, so deadlines,
// renewal schedules, wait bounds and backoff are asserted exactly (or within
// the documented jitter). Every bubble closes its Clients and its backend
// (t.Cleanup runs inside the bubble), so no goroutine is left blocked.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

const tmNS = fencelock.DefaultNamespace

// tmCall is one backend call as the Client made it.
type tmCall struct {
	op memorybackend.Op
	at time.Duration // since the backend was made
	n  int           // requests in a Renew batch
}

// tmBackend is a memorybackend.Backend that also records when the Client
// called it, for assertions on schedules (renewal rounds, retries, backoff).
type tmBackend struct {
	*memorybackend.Backend
	start time.Time

	mu    sync.Mutex
	calls []tmCall

	// notSentRenews is how many Renew calls to fail, without sending
	// anything, with an error wrapping fencelock.ErrNotSent (as the Redis
	// backend does when it cannot dial).
	notSentRenews atomic.Int32
}

func (b *tmBackend) record(ctx context.Context, op memorybackend.Op, n int) {
	if ctx.Err() != nil {
		return // the memory backend sends nothing either
	}
	b.mu.Lock()
	b.calls = append(b.calls, tmCall{op: op, at: time.Since(b.start), n: n})
	b.mu.Unlock()
}

func (b *tmBackend) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	b.record(ctx, memorybackend.Acquire, 1)
	return b.Backend.Acquire(ctx, req)
}

func (b *tmBackend) Release(ctx context.Context, req driver.ReleaseRequest) (driver.ReleaseResult, error) {
	b.record(ctx, memorybackend.Release, 1)
	return b.Backend.Release(ctx, req)
}

func (b *tmBackend) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	for n := b.notSentRenews.Load(); n > 0; n = b.notSentRenews.Load() {
		if b.notSentRenews.CompareAndSwap(n, n-1) {
			return nil, fmt.Errorf("tmBackend: dial refused: %w", fencelock.ErrNotSent)
		}
	}
	b.record(ctx, memorybackend.Renew, len(reqs))
	return b.Backend.Renew(ctx, reqs)
}

func (b *tmBackend) TTL(ctx context.Context, ref driver.Ref) (time.Duration, error) {
	b.record(ctx, memorybackend.TTL, 1)
	return b.Backend.TTL(ctx, ref)
}

// at returns when the calls of op were made.
func (b *tmBackend) at(op memorybackend.Op) []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var at []time.Duration
	for _, c := range b.calls {
		if c.op == op {
			at = append(at, c.at)
		}
	}
	return at
}

// renewBatches returns the sizes of the Renew calls.
func (b *tmBackend) renewBatches() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n []int
	for _, c := range b.calls {
		if c.op == memorybackend.Renew {
			n = append(n, c.n)
		}
	}
	return n
}

// tmShared lets several Clients use one backend: it hides Close, which the
// environment calls once, after the Clients are closed.
type tmShared struct {
	driver.Store
	driver.Notifier
	driver.Ticker
}

// tmEnv is one synctest bubble's backend and clock.
type tmEnv struct {
	t     *testing.T
	b     *tmBackend
	start time.Time
}

// tmNewEnv makes a backend inside the bubble, closed at cleanup after the
// Clients made by client.
func tmNewEnv(t *testing.T) *tmEnv {
	t.Helper()
	b := &tmBackend{Backend: memorybackend.New(), start: time.Now()}
	t.Cleanup(func() { b.Close() })
	return &tmEnv{t: t, b: b, start: b.start}
}

// client makes a Client on the environment's backend whose tokens are
// name1, name2, ...; it is closed at cleanup.
func (e *tmEnv) client(name string, opts ...fencelock.Option) *fencelock.Client {
	var n atomic.Int64
	gen := fencelock.WithTokenGenerator(func() (string, error) {
		return fmt.Sprintf("%s%d", name, n.Add(1)), nil
	})
	c := fencelock.New(tmShared{e.b, e.b, e.b}, append([]fencelock.Option{gen}, opts...)...)
	e.t.Cleanup(func() { c.Close() })
	return c
}

// now is the virtual time since the environment was made.
func (e *tmEnv) now() time.Duration { return time.Since(e.start) }

// sleepUntil sleeps until d after the start.
func (e *tmEnv) sleepUntil(d time.Duration) {
	e.t.Helper()
	if now := e.now(); d < now {
		e.t.Fatalf("sleepUntil(%v): already at %v", d, now)
	}
	time.Sleep(d - e.now())
}

// state is the memory backend's view of key in the default namespace.
func (e *tmEnv) state(key string) memorybackend.LockState { return e.b.State(tmNS, key) }

// holdTokens returns the tokens of a lock's live holds.
func tmHoldTokens(s memorybackend.LockState) []string {
	var toks []string
	for _, h := range s.Holds {
		toks = append(toks, h.Token)
	}
	return toks
}

// tombstone returns the remaining life of token's tombstone, or 0.
func tmTombstone(s memorybackend.LockState, token string) time.Duration {
	for _, ts := range s.Tombstones {
		if ts.Token == token {
			return ts.TTL
		}
	}
	return 0
}

func tmIsClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// tmResult is the outcome of an Acquire run in a goroutine.
type tmResult struct {
	lk  *fencelock.Lock
	err error
	at  time.Duration
}

// goAcquire runs Acquire in a goroutine of the bubble.
func (e *tmEnv) goAcquire(ctx context.Context, c *fencelock.Client, key string, ttl time.Duration, opts ...fencelock.AcquireOption) <-chan tmResult {
	ch := make(chan tmResult, 1)
	go func() {
		lk, err := c.Acquire(ctx, key, ttl, opts...)
		ch <- tmResult{lk, err, e.now()}
	}()
	return ch
}

// tmLossHandler is a slog.Handler that calls onLoss, in the goroutine that
// declared the loss, with the key of every "lock lost" warning.
type tmLossHandler struct{ onLoss func(key string) }

func (h tmLossHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h tmLossHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h tmLossHandler) WithGroup(string) slog.Handler            { return h }
func (h tmLossHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "fencelock: lock lost" {
		return nil
	}
	var key string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "key" {
			key = a.Value.String()
			return false
		}
		return true
	})
	h.onLoss(key)
	return nil
}

// TestTimingDeadlineAtSafetyMargin pins down that the local
// lease deadline is the send time of the acquiring request + ttl − margin
// (margin = ttl × WithSafetyMargin, 10% by default); Held/Err stay good up
// to the instant before, and Done closes and Err/Held report ErrLost exactly
// at it, never later, while the server's lease still has the margin to run.
// The lost hold is then released in the background, so the key is free
// before its server lease would have ended.
func TestTimingDeadlineAtSafetyMargin(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []fencelock.Option
		ttl   time.Duration
		local time.Duration
	}{
		{"default 10%", nil, time.Second, 900 * time.Millisecond},
		{"WithSafetyMargin(0.25)", []fencelock.Option{fencelock.WithSafetyMargin(0.25)}, time.Second, 750 * time.Millisecond},
		{"WithSafetyMargin(0.5)", []fencelock.Option{fencelock.WithSafetyMargin(0.5)}, 2 * time.Second, time.Second},
		{"WithSafetyMargin(0.001)", []fencelock.Option{fencelock.WithSafetyMargin(0.001)}, 10 * time.Second, 9990 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("a", tc.opts...)
				other := e.client("b")
				ctx := context.Background()

				e.sleepUntil(10 * time.Millisecond) // the deadline counts from the send time, not from the Client's start
				sent := time.Now()
				lk, err := c.TryAcquire(ctx, "k", tc.ttl)
				if err != nil {
					t.Fatalf("TryAcquire: %v", err)
				}
				if got := lk.Deadline().Sub(sent); got != tc.local {
					t.Errorf("Deadline = send time + %v, want + %v (ttl %v less the margin)", got, tc.local, tc.ttl)
				}

				time.Sleep(tc.local - time.Nanosecond)
				if err := lk.Err(); err != nil || !lk.Held() || tmIsClosed(lk.Done()) {
					t.Errorf("1ns before the deadline: Err = %v, Held = %v, Done closed = %v; want held", err, lk.Held(), tmIsClosed(lk.Done()))
				}
				if _, err := other.TryAcquire(ctx, "k", tc.ttl); !errors.Is(err, fencelock.ErrNotAcquired) {
					t.Errorf("another client 1ns before the deadline: %v, want ErrNotAcquired", err)
				}

				<-lk.Done()
				if got := time.Since(sent); got != tc.local {
					t.Errorf("Done closed %v after the send, want exactly %v", got, tc.local)
				}
				if err := lk.Err(); !errors.Is(err, fencelock.ErrLost) {
					t.Errorf("Err at the deadline = %v, want ErrLost", err)
				}
				if lk.Held() {
					t.Error("Held at the deadline")
				}

				// Released in the background at once: the key is free while
				// the server's lease would still have the margin to run.
				synctest.Wait()
				if st := e.state("k"); st.Held() {
					t.Errorf("at the deadline the lost hold is still on the server: %+v", st)
				}
				lk2, err := other.TryAcquire(ctx, "k", tc.ttl)
				if err != nil {
					t.Fatalf("another client at the deadline (%v before the server lease ends): %v", tc.ttl-tc.local, err)
				}
				if err := lk2.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			})
		})
	}
}

// TestTimingErrReadsClockBeforeKeeper pins down that Err and Held
// read the clock, so they report ErrLost at the deadline instant even when
// the lease keeper has not yet got to the lock. Two locks share a deadline;
// the keeper declares them lost one after the other, and while it reports
// the first (in the logger, in the keeper's goroutine) the second is
// checked: its Done is still open, yet Err already says ErrLost.
func TestTimingErrReadsClockBeforeKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type seen struct {
			key       string
			at        time.Duration
			doneFirst bool
			err       error
			held      bool
		}
		var (
			mu    sync.Mutex
			locks = map[string]*fencelock.Lock{}
			got   []seen
			fired atomic.Bool
		)
		e := tmNewEnv(t)
		onLoss := func(key string) {
			if !fired.CompareAndSwap(false, true) {
				return // the second loss, or the one Err below declares
			}
			mu.Lock()
			var other string
			for k := range locks {
				if k != key {
					other = k
				}
			}
			lk := locks[other]
			mu.Unlock()
			s := seen{key: other, at: e.now(), doneFirst: tmIsClosed(lk.Done())}
			s.err = lk.Err()
			s.held = lk.Held()
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
		}
		c := e.client("a", fencelock.WithLogger(slog.New(tmLossHandler{onLoss})))
		ctx := context.Background()
		for _, key := range []string{"k1", "k2"} {
			lk, err := c.TryAcquire(ctx, key, time.Second)
			if err != nil {
				t.Fatalf("TryAcquire %s: %v", key, err)
			}
			mu.Lock()
			locks[key] = lk
			mu.Unlock()
		}
		mu.Lock()
		k1, k2 := locks["k1"], locks["k2"]
		mu.Unlock()
		<-k1.Done()
		<-k2.Done()
		synctest.Wait() // the keeper has finished reporting the losses
		if at := e.now(); at != 900*time.Millisecond {
			t.Errorf("lost at %v, want 900ms", at)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("loss hook ran %d times, want 1", len(got))
		}
		s := got[0]
		if s.doneFirst {
			t.Fatalf("%s: the keeper had already ended it; the check did not run before the keeper", s.key)
		}
		if s.at != 900*time.Millisecond || !errors.Is(s.err, fencelock.ErrLost) || s.held {
			t.Errorf("%s at %v, before the keeper got to it: Err = %v, Held = %v; want ErrLost, false at 900ms", s.key, s.at, s.err, s.held)
		}
	})
}

// TestTimingInvalidSafetyMargin pins down that a WithSafetyMargin
// outside [0.001, 0.5] (0, 0.6, NaN, ...) makes every call of the Client
// fail with ErrInvalidArgument, every time, without a backend call; the
// edges are valid.
func TestTimingInvalidSafetyMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		ctx := context.Background()
		for _, f := range []float64{0, 0.6, math.NaN(), -0.1, 0.0009, 0.5001, math.Inf(1)} {
			c := e.client("x", fencelock.WithSafetyMargin(f))
			for i := range 3 {
				if _, err := c.TryAcquire(ctx, "k", time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
					t.Errorf("margin %v, call %d: TryAcquire: %v, want ErrInvalidArgument", f, i, err)
				}
				if _, err := c.Acquire(ctx, "k", time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
					t.Errorf("margin %v, call %d: Acquire: %v, want ErrInvalidArgument", f, i, err)
				}
				ran := false
				err := c.Do(ctx, "k", time.Second, func(context.Context, *fencelock.Lock) error { ran = true; return nil })
				if !errors.Is(err, fencelock.ErrInvalidArgument) || ran {
					t.Errorf("margin %v, call %d: Do: %v (fn ran: %v), want ErrInvalidArgument", f, i, err, ran)
				}
			}
			var iae *fencelock.InvalidArgumentError
			_, err := c.TryAcquire(ctx, "k", time.Second)
			if !errors.As(err, &iae) || !strings.Contains(iae.Name, "WithSafetyMargin") {
				t.Errorf("margin %v: error %v does not name WithSafetyMargin", f, err)
			}
		}
		if calls := e.b.Calls(memorybackend.AllOps); calls.Attempted != 0 {
			t.Errorf("invalid margins made %d backend calls, want 0", calls.Attempted)
		}
		for _, f := range []float64{0.001, 0.5} {
			c := e.client("y", fencelock.WithSafetyMargin(f))
			lk, err := c.TryAcquire(ctx, "k", time.Second)
			if err != nil {
				t.Fatalf("margin %v: %v", f, err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		}
	})
}

// TestTimingAutoRenewIntervalBound pins down that a WithAutoRenew
// interval must be shorter than the local lease (ttl − margin), not just the
// ttl; Refresh refuses a ttl whose local lease is not longer than the
// lock's interval.
func TestTimingAutoRenewIntervalBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		ctx := context.Background()
		def := e.client("a")
		quarter := e.client("b", fencelock.WithSafetyMargin(0.25))
		for _, tc := range []struct {
			c        *fencelock.Client
			margin   string
			interval time.Duration
			ok       bool
		}{
			{def, "10%", 899 * time.Millisecond, true},
			{def, "10%", 900 * time.Millisecond, false},
			{def, "10%", 950 * time.Millisecond, false},
			{def, "10%", time.Second, false},
			{def, "10%", 0, false},
			{def, "10%", -time.Millisecond, false},
			{quarter, "25%", 749 * time.Millisecond, true},
			{quarter, "25%", 750 * time.Millisecond, false},
			{quarter, "25%", 800 * time.Millisecond, false},
		} {
			lk, err := tc.c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(tc.interval))
			switch {
			case tc.ok && err != nil:
				t.Errorf("margin %s, ttl 1s, WithAutoRenew(%v): %v, want accepted", tc.margin, tc.interval, err)
			case !tc.ok && !errors.Is(err, fencelock.ErrInvalidArgument):
				t.Errorf("margin %s, ttl 1s, WithAutoRenew(%v): %v, want ErrInvalidArgument", tc.margin, tc.interval, err)
			}
			if lk != nil {
				lk.Release(ctx)
			}
			err = tc.c.Do(ctx, "k", time.Second, func(context.Context, *fencelock.Lock) error { return nil }, fencelock.WithAutoRenew(tc.interval))
			if tc.ok != (err == nil) {
				t.Errorf("margin %s, Do ttl 1s, WithAutoRenew(%v): %v", tc.margin, tc.interval, err)
			}
		}

		lk, err := def.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		// 333ms less 10% is 299.7ms: not longer than the 300ms interval.
		if err := lk.Refresh(ctx, 333*time.Millisecond); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("Refresh(333ms) of a lock renewed every 300ms: %v, want ErrInvalidArgument", err)
		}
		if !lk.Held() {
			t.Error("a refused Refresh ended the lock")
		}
		if err := lk.Refresh(ctx, 334*time.Millisecond); err != nil {
			t.Errorf("Refresh(334ms): %v", err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
}

// TestTimingLateReplyTryAcquire pins down that an acquire whose
// reply comes after the local deadline of the lease it asked for is not
// handed out. TryAcquire fails with ErrUnavailable exactly at the local
// deadline (ttl 150ms → 135ms), and the hold the server made is released
// in the background with a tombstone, so the key is free at once.
func TestTimingLateReplyTryAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		other := e.client("b")
		ctx := context.Background()
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, ReplyDelay: 300 * time.Millisecond})

		lk, err := c.TryAcquire(ctx, "k", 150*time.Millisecond)
		if lk != nil {
			t.Fatalf("TryAcquire handed out a lock whose reply came after its lease (Err %v, Held %v)", lk.Err(), lk.Held())
		}
		if at := e.now(); at != 135*time.Millisecond {
			t.Errorf("TryAcquire returned at %v, want 135ms (the local deadline)", at)
		}
		if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
			t.Errorf("TryAcquire: %v, want ErrUnavailable (and not ErrNotAcquired)", err)
		}
		var ue *fencelock.UnavailableError
		if !errors.As(err, &ue) || ue.Op != "acquire" || ue.Key != "k" || ue.Attempts != 1 {
			t.Errorf("error %#v, want an *UnavailableError for acquire \"k\" after 1 attempt", err)
		}

		synctest.Wait()
		st := e.state("k")
		if st.Held() {
			t.Errorf("the abandoned hold is still on the server: %v", tmHoldTokens(st))
		}
		if ts := tmTombstone(st, "a1"); ts != 10*time.Minute {
			t.Errorf("tombstone of a1: %v, want 10m", ts)
		}
		lk2, err := other.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatalf("another client after the abandoned acquire: %v", err)
		}
		lk2.Release(ctx)
	})
}

// TestTimingLateRequestRefusedByTombstone pins down that
// an acquire request that arrives after its caller gave up (RequestDelay
// past the local deadline) is refused by the tombstone the Client's
// clean-up release left, so it takes the lock for nobody.
func TestTimingLateRequestRefusedByTombstone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, RequestDelay: 300 * time.Millisecond})

		if _, err := c.TryAcquire(ctx, "k", 150*time.Millisecond); !errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("TryAcquire: %v, want ErrUnavailable", err)
		}
		if at := e.now(); at != 135*time.Millisecond {
			t.Errorf("TryAcquire returned at %v, want 135ms", at)
		}
		e.sleepUntil(301 * time.Millisecond) // the request landed at 300ms
		if calls := e.b.Calls(memorybackend.Acquire); calls.Applied != 1 {
			t.Fatalf("acquire requests applied: %d, want 1 (the late one)", calls.Applied)
		}
		st := e.state("k")
		if st.Held() || st.LastFence != 0 {
			t.Errorf("the late acquire took the lock for nobody: holds %v, last fence %d", tmHoldTokens(st), st.LastFence)
		}
		if tmTombstone(st, "a1") == 0 {
			t.Error("no tombstone for the abandoned token a1")
		}
	})
}

// TestTimingLateReplyAcquireRetries pins down that Acquire goes
// on after attempts whose replies come after their leases (with the same
// token), within its bound, and returns a valid Lock when a later attempt
// answers in time: its deadline counts from that attempt, it holds the one
// hold its token made, and its release leaves a tombstone (a late copy of
// the earlier attempts may still be on its way).
func TestTimingLateReplyAcquireRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 2, ReplyDelay: 300 * time.Millisecond})

		lk, err := c.Acquire(ctx, "k", 150*time.Millisecond, fencelock.WithWait(2*time.Second))
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		at := e.b.at(memorybackend.Acquire)
		if len(at) != 3 {
			t.Fatalf("acquire attempts at %v, want 3", at)
		}
		for i := 1; i < len(at); i++ {
			if at[i] < at[i-1]+135*time.Millisecond {
				t.Errorf("attempt %d at %v, before attempt %d (at %v) reached its local deadline", i+1, at[i], i, at[i-1])
			}
		}
		last := at[len(at)-1]
		if now := e.now(); now != last {
			t.Errorf("Acquire returned at %v, want %v (the last attempt's instant reply)", now, last)
		}
		if got := lk.Deadline().Sub(e.start); got != last+135*time.Millisecond {
			t.Errorf("Deadline at %v, want %v (the successful attempt + 135ms)", got, last+135*time.Millisecond)
		}
		if lk.Err() != nil || !lk.Held() || lk.Fence() != 1 || lk.Token() != "a1" {
			t.Errorf("lock: Err %v, Held %v, Fence %d, Token %q; want held, fence 1, token a1", lk.Err(), lk.Held(), lk.Fence(), lk.Token())
		}
		if st := e.state("k"); !slices.Equal(tmHoldTokens(st), []string{"a1"}) || st.Holds[0].TTL != 150*time.Millisecond {
			t.Errorf("server state %+v, want one hold a1 with 150ms", st)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		st := e.state("k")
		if st.Held() || tmTombstone(st, "a1") != 10*time.Minute {
			t.Errorf("after Release: holds %v, tombstones %+v; want free and a 10m tombstone for a1", tmHoldTokens(st), st.Tombstones)
		}
	})
}

// TestTimingLateReplyAcquireGivesUp pins down that, when
// every reply comes after its lease, Acquire gives up at its WithWait bound
// exactly (the attempt in flight is cut) with ErrUnavailable, and the hold
// its attempts made is released with a tombstone.
func TestTimingLateReplyAcquireGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		clear := e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, ReplyDelay: 300 * time.Millisecond})

		lk, err := c.Acquire(ctx, "k", 150*time.Millisecond, fencelock.WithWait(500*time.Millisecond))
		if lk != nil {
			t.Fatal("Acquire handed out a lock whose reply came after its lease")
		}
		if at := e.now(); at != 500*time.Millisecond {
			t.Errorf("Acquire returned at %v, want 500ms", at)
		}
		if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
			t.Errorf("Acquire: %v, want ErrUnavailable", err)
		}
		if n := len(e.b.at(memorybackend.Acquire)); n < 3 {
			t.Errorf("%d attempts in 500ms, want at least 3", n)
		}
		clear()
		synctest.Wait()
		st := e.state("k")
		if st.Held() || tmTombstone(st, "a1") == 0 {
			t.Errorf("after giving up: holds %v, tombstones %+v; want free, tombstone for a1", tmHoldTokens(st), st.Tombstones)
		}
	})
}

// TestTimingRenewEveryInterval pins down the renewal schedule: a lock with
// WithAutoRenew(300ms) is renewed exactly every 300ms, and each renewal
// moves the local deadline to its send time + ttl − margin.
func TestTimingRenewEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		e.sleepUntil(3050 * time.Millisecond)
		var want []time.Duration
		for d := 300 * time.Millisecond; d <= 3*time.Second; d += 300 * time.Millisecond {
			want = append(want, d)
		}
		if got := e.b.at(memorybackend.Renew); !slices.Equal(got, want) {
			t.Errorf("renewals at %v, want %v", got, want)
		}
		if got := lk.Deadline().Sub(e.start); got != 3900*time.Millisecond {
			t.Errorf("deadline at %v, want 3.9s (last renewal at 3s + 900ms)", got)
		}
		if st := e.state("k"); len(st.Holds) != 1 || st.Holds[0].TTL != 950*time.Millisecond {
			t.Errorf("server lease %+v, want 950ms left", st.Holds)
		}
		if !lk.Held() {
			t.Errorf("not held: %v", lk.Err())
		}
		if err := lk.Release(ctx); err != nil {
			t.Error(err)
		}
	})
}

// TestTimingRenewBatch pins down renewal batching: locks of one Client
// whose renewals are due within a fifth of their interval of each other are
// renewed together, in one Renew call per round.
func TestTimingRenewBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		var locks []*fencelock.Lock
		for i, at := range []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond} {
			e.sleepUntil(at)
			lk, err := c.TryAcquire(ctx, fmt.Sprintf("k%d", i), time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, lk)
		}
		e.sleepUntil(1250 * time.Millisecond)
		if got, want := e.b.at(memorybackend.Renew), []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 900 * time.Millisecond, 1200 * time.Millisecond}; !slices.Equal(got, want) {
			t.Errorf("Renew calls at %v, want %v", got, want)
		}
		if got := e.b.renewBatches(); !slices.Equal(got, []int{3, 3, 3, 3}) {
			t.Errorf("Renew batch sizes %v, want 3 locks in each call", got)
		}
		for _, lk := range locks {
			if got := lk.Deadline().Sub(e.start); got != 2100*time.Millisecond {
				t.Errorf("%s: deadline at %v, want 2.1s", lk.Key(), got)
			}
			lk.Release(ctx)
		}
	})
}

// TestTimingRenewBoundedWhenPaused pins down that each renewal
// attempt gets a deadline shorter than the interval: with the server
// paused, each renewal request is cut at interval/2 and retried interval/4
// later, so several attempts fit before the deadline (300, 525, 750ms for an
// interval of 300ms); the lock is lost exactly at its deadline when all
// fail; the requests the paused server applies later do not keep it.
func TestTimingRenewBoundedWhenPaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := lk.Context(ctx)
		defer cancel()
		resume := e.b.Pause()
		defer resume()

		<-lk.Done()
		if at := e.now(); at != 900*time.Millisecond {
			t.Errorf("lost at %v, want 900ms (the deadline)", at)
		}
		if got, want := e.b.at(memorybackend.Renew), []time.Duration{300 * time.Millisecond, 525 * time.Millisecond, 750 * time.Millisecond}; !slices.Equal(got, want) {
			t.Errorf("renewal attempts at %v, want %v (each cut at +150ms, retried 75ms later)", got, want)
		}
		if err := lk.Err(); !errors.Is(err, fencelock.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", err)
		}
		<-lctx.Done() // cancelled by the same goroutine, right after Done closed
		if at := e.now(); at != 900*time.Millisecond {
			t.Errorf("lock context ended at %v, want 900ms", at)
		}
		if cause := context.Cause(lctx); !errors.Is(cause, fencelock.ErrLost) {
			t.Errorf("lock context cause = %v, want ErrLost", cause)
		}

		// The server wakes while the hold's lease (till 1s) still runs: it
		// applies the queued renewals, then the background release.
		e.sleepUntil(950 * time.Millisecond)
		resume()
		synctest.Wait()
		if calls := e.b.Calls(memorybackend.Renew); calls.Applied != 3 {
			t.Errorf("renewals applied after resume: %d, want 3", calls.Applied)
		}
		if st := e.state("k"); st.Held() {
			t.Errorf("the lost lock is still held on the server after resume: %+v", st.Holds)
		}
	})
}

// TestTimingRenewRecovers pins down renewal retries: renewals that fail
// (refused) leave the deadline where it was and are retried interval/4
// later; the first one that succeeds moves the deadline to its send time +
// ttl − margin, past the old one, and the schedule goes on from there.
func TestTimingRenewRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 2, Refuse: true})
		e.sleepUntil(400 * time.Millisecond)
		if got := lk.Deadline().Sub(e.start); got != 900*time.Millisecond {
			t.Errorf("deadline after failed renewals at %v, want 900ms (unchanged)", got)
		}
		e.sleepUntil(500 * time.Millisecond)
		if got := lk.Deadline().Sub(e.start); got != 1350*time.Millisecond {
			t.Errorf("deadline after the renewal at 450ms at %v, want 1.35s", got)
		}
		e.sleepUntil(1000 * time.Millisecond)
		if err := lk.Err(); err != nil {
			t.Errorf("at 1s, past the first deadline: %v, want held", err)
		}
		if got, want := e.b.at(memorybackend.Renew), []time.Duration{300 * time.Millisecond, 375 * time.Millisecond, 450 * time.Millisecond, 750 * time.Millisecond}; !slices.Equal(got, want) {
			t.Errorf("renewals at %v, want %v", got, want)
		}
		if err := lk.Release(ctx); err != nil {
			t.Error(err)
		}
	})
}

// TestTimingRenewFindsHoldGone pins down loss on renewal: when a renewal
// finds the hold gone (an operator's DEL, a failover), the lock is lost at
// that instant, and its Context is cancelled with cause ErrLost.
func TestTimingRenewFindsHoldGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := lk.Context(ctx)
		defer cancel()
		e.sleepUntil(100 * time.Millisecond)
		if !e.b.Delete(tmNS, "k") {
			t.Fatal("Delete found no hold")
		}
		<-lctx.Done()
		if at := e.now(); at != 300*time.Millisecond {
			t.Errorf("lock context ended at %v, want 300ms (the renewal)", at)
		}
		if cause := context.Cause(lctx); !errors.Is(cause, fencelock.ErrLost) {
			t.Errorf("lock context cause = %v, want ErrLost", cause)
		}
		if err := lk.Err(); !errors.Is(err, fencelock.ErrLost) || !tmIsClosed(lk.Done()) {
			t.Errorf("Err = %v, Done closed %v; want ErrLost, closed", err, tmIsClosed(lk.Done()))
		}
	})
}

// TestTimingRefreshTakesTurns pins down that Refresh and the automatic
// renewal take turns: a Refresh waits for a renewal in flight and then sets
// the lease and deadline itself; a renewal does not start while a Refresh is
// in flight, and resumes interval after it.
func TestTimingRefreshTakesTurns(t *testing.T) {
	t.Run("refresh waits for renewal", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := tmNewEnv(t)
			c := e.client("a")
			ctx := context.Background()
			lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 1, ReplyDelay: 100 * time.Millisecond})
			e.sleepUntil(350 * time.Millisecond) // the renewal sent at 300ms answers at 400ms
			if err := lk.Refresh(ctx, 2*time.Second); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if at := e.now(); at != 400*time.Millisecond {
				t.Errorf("Refresh returned at %v, want 400ms (after the renewal in flight)", at)
			}
			if got, want := e.b.at(memorybackend.Renew), []time.Duration{300 * time.Millisecond, 400 * time.Millisecond}; !slices.Equal(got, want) {
				t.Errorf("renewals at %v, want %v", got, want)
			}
			if got := lk.Deadline().Sub(e.start); got != 2200*time.Millisecond {
				t.Errorf("deadline at %v, want 2.2s (the Refresh's 2s lease from 400ms, less 10%%)", got)
			}
			if st := e.state("k"); len(st.Holds) != 1 || st.Holds[0].TTL != 2*time.Second {
				t.Errorf("server lease %+v, want 2s", st.Holds)
			}
			e.sleepUntil(750 * time.Millisecond) // the next renewal, at 700ms, uses the new ttl
			if got := lk.Deadline().Sub(e.start); got != 2500*time.Millisecond {
				t.Errorf("deadline after the renewal at 700ms: %v, want 2.5s", got)
			}
			lk.Release(ctx)
		})
	})
	t.Run("renewal waits for refresh", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := tmNewEnv(t)
			c := e.client("a")
			ctx := context.Background()
			lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 1, ReplyDelay: 200 * time.Millisecond})
			e.sleepUntil(250 * time.Millisecond)
			if err := lk.Refresh(ctx, time.Second); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			e.sleepUntil(600 * time.Millisecond)
			if got, want := e.b.at(memorybackend.Renew), []time.Duration{250 * time.Millisecond, 550 * time.Millisecond}; !slices.Equal(got, want) {
				t.Errorf("renewals at %v, want %v (none while the Refresh was in flight)", got, want)
			}
			if got := lk.Deadline().Sub(e.start); got != 1450*time.Millisecond {
				t.Errorf("deadline at %v, want 1.45s", got)
			}
			lk.Release(ctx)
		})
	})
}

// TestTimingRefreshReplyPastDeadline pins down Refresh under a slow server:
// a Refresh whose reply would come after the current deadline is cut at the
// deadline with an error matching ErrUnavailable, and the lock is lost then
// (and released in the background, though the server applied the Refresh).
func TestTimingRefreshReplyPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 1, ReplyDelay: 500 * time.Millisecond})
		e.sleepUntil(800 * time.Millisecond)
		err = lk.Refresh(ctx, time.Second)
		if at := e.now(); at != 900*time.Millisecond {
			t.Errorf("Refresh returned at %v, want 900ms (the deadline)", at)
		}
		if !errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("Refresh: %v, want ErrUnavailable", err)
		}
		if err := lk.Err(); !errors.Is(err, fencelock.ErrLost) || lk.Held() {
			t.Errorf("after the late Refresh: Err %v, Held %v; want ErrLost", err, lk.Held())
		}
		synctest.Wait()
		if !tmIsClosed(lk.Done()) {
			t.Error("Done not closed")
		}
		if st := e.state("k"); st.Held() {
			t.Errorf("the lost lock is still held on the server: %+v", st.Holds)
		}
	})
}

// TestTimingRefreshNotSentKeepsDeadline pins down Refresh's documented
// promise ("the lock stays held until its current deadline unless a renewal
// succeeds") for a Refresh that certainly sent nothing: its context was
// already done, or the backend failed with ErrNotSent. Such a Refresh to a
// shorter ttl cannot have shortened the server's lease, so it must not
// shorten the local deadline either (no false loss). It fails while
// lease.go's finishRenewal takes the earlier of the two possible leases
// after any error, also one from a request that certainly was not sent.
func TestTimingRefreshNotSentKeepsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(e *tmEnv, ctx context.Context) context.Context
	}{
		{"context already done", func(e *tmEnv, ctx context.Context) context.Context {
			done, cancel := context.WithCancel(ctx)
			cancel()
			return done
		}},
		{"ErrNotSent", func(e *tmEnv, ctx context.Context) context.Context {
			e.b.notSentRenews.Store(1)
			return ctx
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("a")
				ctx := context.Background()
				lk, err := c.TryAcquire(ctx, "k", time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if err := lk.Refresh(tc.prepare(e, ctx), 100*time.Millisecond); err == nil {
					t.Fatal("Refresh succeeded without sending")
				}
				if calls := e.b.Calls(memorybackend.Renew); calls.Attempted != 0 {
					t.Fatalf("renew requests sent: %d, want 0", calls.Attempted)
				}
				if got := lk.Deadline().Sub(e.start); got != 900*time.Millisecond {
					t.Errorf("deadline after a Refresh that sent nothing: %v, want 900ms (unchanged)", got)
				}
				e.sleepUntil(500 * time.Millisecond)
				if err := lk.Err(); err != nil {
					t.Errorf("at 500ms, before the current deadline (900ms): %v, want held", err)
				}
				lk.Release(ctx)
			})
		})
	}
}

// TestTimingWaitBoundsInFlight pins down that WithWait(300ms)
// and a 300ms context deadline each bound the whole Acquire, including a
// request in flight to a paused server: it returns at 300ms exactly with
// ErrUnavailable, and the hold the request makes when the server resumes is
// released (with a tombstone).
func TestTimingWaitBoundsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait bool
	}{{"WithWait", true}, {"context deadline", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("a")
				ctx := context.Background()
				var opts []fencelock.AcquireOption
				if tc.wait {
					opts = append(opts, fencelock.WithWait(300*time.Millisecond))
				} else {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
					defer cancel()
				}
				resume := e.b.Pause()
				defer resume()
				var r tmResult
				select {
				case r = <-e.goAcquire(ctx, c, "k", 10*time.Second, opts...):
				case <-time.After(time.Minute):
					t.Fatal("Acquire still waiting for the paused server after 1m")
				}
				lk, err := r.lk, r.err
				if lk != nil {
					t.Fatal("acquired from a paused server")
				}
				if r.at != 300*time.Millisecond {
					t.Errorf("Acquire returned at %v, want 300ms", r.at)
				}
				if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
					t.Errorf("Acquire: %v, want ErrUnavailable", err)
				}
				if !tc.wait && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Acquire: %v, want it to match context.DeadlineExceeded", err)
				}
				if n := len(e.b.at(memorybackend.Acquire)); n != 1 {
					t.Errorf("%d attempts, want 1 (in flight the whole wait)", n)
				}
				e.sleepUntil(time.Second)
				resume()
				synctest.Wait()
				st := e.state("k")
				if st.Held() || tmTombstone(st, "a1") == 0 {
					t.Errorf("after resume: holds %v, tombstones %+v; want free, tombstone for a1", tmHoldTokens(st), st.Tombstones)
				}
			})
		})
	}
}

// tmBackoffBounds checks that the gaps between attempts follow the default
// ExponentialBackoff{10ms, 1s}: after the first failure the Client tries
// again at once (it has just subscribed to releases), then round r sleeps
// within [d/2, d], d = min(10ms·2^(r−1), 1s).
func tmBackoffBounds(t *testing.T, at []time.Duration) {
	t.Helper()
	if len(at) < 1 || at[0] != 0 {
		t.Errorf("attempts at %v, want the first at 0", at)
		return
	}
	// A failure is not contention: nothing to subscribe to, so every
	// failed attempt backs off, from the first.
	for i := 1; i < len(at); i++ {
		round := i
		d := min(10*time.Millisecond<<(round-1), time.Second)
		if gap := at[i] - at[i-1]; gap < d/2 || gap > d {
			t.Errorf("gap before attempt %d: %v, want within [%v, %v] (backoff round %d)", i+1, gap, d/2, d, round)
		}
	}
}

// TestTimingDefaultMaxFailures pins down that an Acquire with
// neither a context deadline nor WithWait gives up with ErrUnavailable after
// DefaultMaxFailures consecutive failed attempts, spaced by the default
// jittered exponential backoff.
func TestTimingDefaultMaxFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
		ctx, cancel := context.WithCancel(context.Background()) // no deadline
		defer cancel()
		var r tmResult
		select {
		case r = <-e.goAcquire(ctx, c, "k", time.Second):
		case <-time.After(time.Hour):
			t.Fatalf("Acquire with no deadline still trying after an hour of refusals (%d attempts)", len(e.b.at(memorybackend.Acquire)))
		}
		lk, err := r.lk, r.err
		if lk != nil {
			t.Fatal("acquired from a refusing backend")
		}
		if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
			t.Errorf("Acquire: %v, want ErrUnavailable", err)
		}
		var ue *fencelock.UnavailableError
		if !errors.As(err, &ue) || ue.Attempts != fencelock.DefaultMaxFailures || ue.Cause != nil || !errors.Is(err, memorybackend.ErrRefused) {
			t.Errorf("error %#v, want %d attempts, no cause, matching the backend error", err, fencelock.DefaultMaxFailures)
		}
		at := e.b.at(memorybackend.Acquire)
		if len(at) != fencelock.DefaultMaxFailures {
			t.Fatalf("%d attempts, want DefaultMaxFailures = %d", len(at), fencelock.DefaultMaxFailures)
		}
		tmBackoffBounds(t, at)
		if ue != nil && (r.at != at[len(at)-1] || ue.Waited != r.at) {
			t.Errorf("returned at %v (Waited %v), want at the last attempt %v", r.at, ue.Waited, at[len(at)-1])
		}
		// 9 sleeps: 10+20+...+640ms+1s+1s at most, half that at least.
		if r.at < 1635*time.Millisecond || r.at > 3270*time.Millisecond {
			t.Errorf("gave up after %v, want within [1.635s, 3.27s]", r.at)
		}
	})
}

// TestTimingMaxFailuresOption pins down that WithMaxFailures(3)
// gives up after 3 consecutive failures (also with a WithWait bound);
// WithMaxFailures(0) never gives up on failures, only when the context
// ends, and then with ErrUnavailable matching the context's error.
func TestTimingMaxFailuresOption(t *testing.T) {
	t.Run("3", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := tmNewEnv(t)
			c := e.client("a")
			e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
			_, err := c.Acquire(context.Background(), "k", time.Second, fencelock.WithMaxFailures(3))
			if !errors.Is(err, fencelock.ErrUnavailable) {
				t.Errorf("Acquire: %v, want ErrUnavailable", err)
			}
			at := e.b.at(memorybackend.Acquire)
			if len(at) != 3 {
				t.Errorf("%d attempts, want 3", len(at))
			}
			tmBackoffBounds(t, at)

			start := e.now()
			_, err = c.Acquire(context.Background(), "k", time.Second, fencelock.WithMaxFailures(3), fencelock.WithWait(time.Minute))
			if !errors.Is(err, fencelock.ErrUnavailable) {
				t.Errorf("Acquire with WithWait(1m): %v, want ErrUnavailable", err)
			}
			if n := len(e.b.at(memorybackend.Acquire)) - len(at); n != 3 {
				t.Errorf("with WithWait(1m): %d attempts, want 3", n)
			}
			if d := e.now() - start; d > 30*time.Millisecond {
				t.Errorf("with WithWait(1m): gave up after %v, want the 3 failures' backoff (≤ 30ms)", d)
			}
		})
	})
	t.Run("0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := tmNewEnv(t)
			c := e.client("a")
			e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
			ctx, cancel := context.WithCancel(context.Background()) // no deadline
			defer cancel()
			res := e.goAcquire(ctx, c, "k", time.Second, fencelock.WithMaxFailures(0))
			e.sleepUntil(20 * time.Second)
			select {
			case r := <-res:
				t.Fatalf("WithMaxFailures(0) gave up at %v: %v", r.at, r.err)
			default:
			}
			cancel()
			r := <-res
			if r.at != 20*time.Second {
				t.Errorf("returned at %v, want 20s (the cancel)", r.at)
			}
			if !errors.Is(r.err, fencelock.ErrUnavailable) || !errors.Is(r.err, context.Canceled) {
				t.Errorf("Acquire: %v, want ErrUnavailable matching context.Canceled", r.err)
			}
			if n := len(e.b.at(memorybackend.Acquire)); n < 20 {
				t.Errorf("%d attempts in 20s, want at least 20 (backoff at most 1s)", n)
			}
		})
	})
}

// TestTimingContendedResetsFailures pins down WithMaxFailures' count: an
// attempt that finds the lock held (the backend answered) starts the count
// of consecutive failures again.
func TestTimingContendedResetsFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		holder := e.client("h")
		c := e.client("a")
		ctx := context.Background()
		hl, err := holder.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// Attempts 1-2 refused, attempt 3 answered (held), 4 on refused.
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1})
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 2, Refuse: true})
		_, err = c.Acquire(ctx, "k", time.Second, fencelock.WithMaxFailures(3))
		if !errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("Acquire: %v, want ErrUnavailable", err)
		}
		if n := len(e.b.at(memorybackend.Acquire)) - 1; n != 6 {
			t.Errorf("%d attempts, want 6 (2 failures, 1 held, 3 failures)", n)
		}
		hl.Release(ctx)
	})
}

// TestTimingGiveUpErrors pins down the give-up rule
// of waiter.go: Close → ErrNotAcquired with ErrClosed; the last finished
// attempt found the lock held → ErrNotAcquired; the caller's context ended
// before any attempt → its error alone; otherwise (the backend failed) →
// ErrUnavailable.
func TestTimingGiveUpErrors(t *testing.T) {
	notAcquired := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, fencelock.ErrNotAcquired) || errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("error %v, want ErrNotAcquired and not ErrUnavailable", err)
		}
	}
	unavailable := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotAcquired) {
			t.Errorf("error %v, want ErrUnavailable and not ErrNotAcquired", err)
		}
	}
	bubble := func(name string, f func(t *testing.T, e *tmEnv, holder, c *fencelock.Client)) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				f(t, e, e.client("h"), e.client("a"))
			})
		})
	}
	ctx := context.Background()
	bubble("held", func(t *testing.T, e *tmEnv, holder, c *fencelock.Client) {
		if _, err := holder.TryAcquire(ctx, "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		_, err := c.TryAcquire(ctx, "k", time.Second)
		notAcquired(t, err)
		_, err = c.Acquire(ctx, "k", time.Second, fencelock.WithWait(300*time.Millisecond))
		notAcquired(t, err)
		if at := e.now(); at != 300*time.Millisecond {
			t.Errorf("returned at %v, want 300ms", at)
		}
		var nae *fencelock.NotAcquiredError
		if !errors.As(err, &nae) || nae.HolderTTL <= 0 || nae.Cause != nil {
			t.Errorf("error %#v, want a NotAcquiredError with the holder's lease and no cause", err)
		}
	})
	bubble("refused then held", func(t *testing.T, e *tmEnv, holder, c *fencelock.Client) {
		if _, err := holder.TryAcquire(ctx, "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, Refuse: true})
		_, err := c.Acquire(ctx, "k", time.Second, fencelock.WithWait(300*time.Millisecond))
		notAcquired(t, err)
		if !errors.Is(err, memorybackend.ErrRefused) {
			t.Errorf("error %v does not carry the earlier backend error", err)
		}
	})
	bubble("held then refused", func(t *testing.T, e *tmEnv, holder, c *fencelock.Client) {
		if _, err := holder.TryAcquire(ctx, "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		res := e.goAcquire(ctx, c, "k", time.Second, fencelock.WithWait(300*time.Millisecond))
		synctest.Wait() // it found the lock held and sleeps
		if n := len(e.b.at(memorybackend.Acquire)); n < 2 {
			t.Fatalf("%d attempts before the outage, want the waiter's first", n-1)
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
		r := <-res
		unavailable(t, r.err)
		if r.at != 300*time.Millisecond {
			t.Errorf("returned at %v, want 300ms", r.at)
		}
	})
	bubble("refused", func(t *testing.T, e *tmEnv, holder, c *fencelock.Client) {
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
		_, err := c.TryAcquire(ctx, "k", time.Second)
		unavailable(t, err)
		_, err = c.Acquire(ctx, "k", time.Second, fencelock.WithWait(300*time.Millisecond))
		unavailable(t, err)
		if at := e.now(); at != 300*time.Millisecond {
			t.Errorf("returned at %v, want 300ms", at)
		}
	})
	bubble("no attempt", func(t *testing.T, e *tmEnv, holder, c *fencelock.Client) {
		done, cancel := context.WithCancel(ctx)
		cancel()
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
		_, err := c.Acquire(done, "k", time.Second)
		if !errors.Is(err, context.Canceled) || errors.Is(err, fencelock.ErrNotAcquired) || errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("error %v, want context.Canceled alone: no attempt learnt anything", err)
		}
		if n := len(e.b.at(memorybackend.Acquire)); n != 0 {
			t.Errorf("%d attempts with a done context, want 0", n)
		}
	})
	bubble("closed while failing", func(t *testing.T, e *tmEnv, holder, c *fencelock.Client) {
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true})
		res := e.goAcquire(ctx, c, "k", time.Second, fencelock.WithMaxFailures(0))
		e.sleepUntil(100 * time.Millisecond)
		c.Close()
		r := <-res
		notAcquired(t, r.err)
		if !errors.Is(r.err, fencelock.ErrClosed) || r.at != 100*time.Millisecond {
			t.Errorf("Acquire at %v: %v, want ErrClosed at 100ms", r.at, r.err)
		}
	})
}

// TestTimingSleepBoundedByHolderLease pins down the fallback timer: a waiter
// never sleeps past the holder's remaining lease, so a lock whose holder
// died (its lease lapses, nobody releases) is taken the instant it lapses,
// whatever the retry strategy says.
func TestTimingSleepBoundedByHolderLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		dead := driver.Request{Ref: driver.Ref{Namespace: tmNS, Key: "k", Token: "dead"}, Owner: "dead", TTL: 500 * time.Millisecond}
		if res, err := e.b.Backend.Acquire(ctx, dead); err != nil || !res.Acquired {
			t.Fatalf("the dead holder's hold: %+v, %v", res, err)
		}
		lk, err := c.Acquire(ctx, "k", time.Second, fencelock.WithRetry(fencelock.ConstantBackoff{Delay: 10 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		if at := e.now(); at != 500*time.Millisecond {
			t.Errorf("acquired at %v, want 500ms (the holder's lease end, not the 5-10s backoff)", at)
		}
		lk.Release(ctx)
	})
}

// TestTimingReleaseWakesWaiter pins down release notifications: a release,
// by another Client (the memory backend notifies) or by a goroutine of the
// same Client, wakes a waiter at once, long before its fallback timer.
func TestTimingReleaseWakesWaiter(t *testing.T) {
	for _, same := range []bool{false, true} {
		name := "other client"
		if same {
			name = "same client"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				holder := e.client("h")
				c := holder
				if !same {
					c = e.client("a")
				}
				ctx := context.Background()
				hl, err := holder.TryAcquire(ctx, "k", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				res := e.goAcquire(ctx, c, "k", time.Minute, fencelock.WithRetry(fencelock.ConstantBackoff{Delay: 10 * time.Second}))
				e.sleepUntil(time.Second)
				if err := hl.Release(ctx); err != nil {
					t.Fatal(err)
				}
				r := <-res
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.at != time.Second {
					t.Errorf("waiter acquired at %v, want 1s (the release)", r.at)
				}
				r.lk.Release(ctx)
			})
		})
	}
}

// TestTimingWaitersFIFO pins down the Client's line: goroutines of one
// Client waiting for a key get it in the order they asked, each at the
// instant the one before releases it.
func TestTimingWaitersFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		holder := e.client("h")
		c := e.client("a")
		ctx := context.Background()
		hl, err := holder.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		type got struct {
			i  int
			at time.Duration
		}
		var mu sync.Mutex
		var order []got
		var wg sync.WaitGroup
		for i := range 4 {
			e.sleepUntil(time.Duration(i) * 10 * time.Millisecond)
			wg.Go(func() {
				lk, err := c.Acquire(ctx, "k", time.Minute, fencelock.WithRetry(fencelock.ConstantBackoff{Delay: 10 * time.Second}))
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				mu.Lock()
				order = append(order, got{i, e.now()})
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
				if err := lk.Release(ctx); err != nil {
					t.Errorf("waiter %d: Release: %v", i, err)
				}
			})
		}
		e.sleepUntil(time.Second)
		hl.Release(ctx)
		wg.Wait()
		want := []got{{0, 1000 * time.Millisecond}, {1, 1100 * time.Millisecond}, {2, 1200 * time.Millisecond}, {3, 1300 * time.Millisecond}}
		if !slices.Equal(order, want) {
			t.Errorf("acquisitions %v, want %v", order, want)
		}
	})
}

// TestTimingReleaseDoesNotWaitForRenewal pins down that Release
// does not wait for a renewal in flight (here held up on its way to the
// server): it releases at once, and the abandoned renewal that lands later
// finds nothing to renew and re-creates nothing.
func TestTimingReleaseDoesNotWaitForRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		other := e.client("b")
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 1, RequestDelay: 10 * time.Second})
		e.sleepUntil(350 * time.Millisecond) // the renewal sent at 300ms is on its way
		if err := lk.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
		if at := e.now(); at != 350*time.Millisecond {
			t.Errorf("Release returned at %v, want 350ms (no wait for the renewal in flight)", at)
		}
		if err := lk.Err(); !errors.Is(err, fencelock.ErrReleased) || errors.Is(err, fencelock.ErrLost) {
			t.Errorf("Err = %v, want ErrReleased", err)
		}
		ol, err := other.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatalf("another client right after the release: %v", err)
		}
		e.sleepUntil(10500 * time.Millisecond) // the renewal landed at 10.3s
		if calls := e.b.Calls(memorybackend.Renew); calls.Applied != 1 {
			t.Errorf("renewals applied: %d, want 1 (the late one)", calls.Applied)
		}
		if st := e.state("k"); !slices.Equal(tmHoldTokens(st), []string{"b1"}) {
			t.Errorf("holds %v, want only the other client's b1", tmHoldTokens(st))
		}
		ol.Release(ctx)
	})
}

// TestTimingReleaseLostReply pins down that a release the server
// applied but whose reply was lost is recognised as done (the second
// attempt finds the hold gone while its lease could not have ended):
// Release returns nil, the lock counts as released, not lost, and Do
// returns fn's result.
func TestTimingReleaseLostReply(t *testing.T) {
	t.Run("Release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := tmNewEnv(t)
			c := e.client("a")
			ctx := context.Background()
			lk, err := c.TryAcquire(ctx, "k", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			e.b.Inject(memorybackend.Fault{Ops: memorybackend.Release, Times: 1, LoseReply: true})
			if err := lk.Release(ctx); err != nil {
				t.Errorf("Release: %v, want nil (the first request was applied)", err)
			}
			if err := lk.Err(); !errors.Is(err, fencelock.ErrReleased) || errors.Is(err, fencelock.ErrLost) {
				t.Errorf("Err = %v, want ErrReleased, not ErrLost", err)
			}
			if calls := e.b.Calls(memorybackend.Release); calls.Attempted != 2 || calls.Applied != 2 {
				t.Errorf("release calls %+v, want 2 attempted and applied", calls)
			}
			if st := e.state("k"); st.Held() {
				t.Errorf("still held: %+v", st.Holds)
			}
		})
	})
	t.Run("Do", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := tmNewEnv(t)
			c := e.client("a")
			ran := 0
			err := c.Do(context.Background(), "k", time.Second, func(context.Context, *fencelock.Lock) error {
				ran++
				e.b.Inject(memorybackend.Fault{Ops: memorybackend.Release, Times: 1, LoseReply: true})
				return nil
			})
			if err != nil || ran != 1 {
				t.Errorf("Do: %v (fn ran %d times), want nil after one run", err, ran)
			}
			if st := e.state("k"); st.Held() {
				t.Errorf("still held: %+v", st.Holds)
			}
		})
	})
}

// TestTimingReleaseRefusedRetriedInBackground pins down that a
// release that cannot be sent returns ErrUnavailable (the lock counts as
// released), and the Client goes on releasing in the background, backing
// off from 10ms to 1s, until the backend is back; then the hold is freed and
// a waiter is woken.
func TestTimingReleaseRefusedRetriedInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		w := e.client("w")
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		res := e.goAcquire(ctx, w, "k", time.Minute, fencelock.WithRetry(fencelock.ConstantBackoff{Delay: 10 * time.Second}))
		clear := e.b.Inject(memorybackend.Fault{Ops: memorybackend.Release, Refuse: true})
		e.sleepUntil(100 * time.Millisecond)
		err = lk.Release(ctx)
		if at := e.now(); at != 100*time.Millisecond {
			t.Errorf("Release returned at %v, want 100ms", at)
		}
		if !errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("Release: %v, want ErrUnavailable", err)
		}
		if err := lk.Err(); !errors.Is(err, fencelock.ErrReleased) || lk.Held() {
			t.Errorf("Err = %v, Held %v; want ErrReleased", err, lk.Held())
		}
		e.sleepUntil(2 * time.Second)
		if !e.state("k").Held() {
			t.Fatal("the hold went away while every release was refused")
		}
		clear()
		r := <-res
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		want := []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, // Release's two attempts
			100 * time.Millisecond, 110 * time.Millisecond, 130 * time.Millisecond, 170 * time.Millisecond, 250 * time.Millisecond, 410 * time.Millisecond, 730 * time.Millisecond, 1370 * time.Millisecond, 2370 * time.Millisecond}
		if got := e.b.at(memorybackend.Release); !slices.Equal(got, want) {
			t.Errorf("release attempts at %v, want %v", got, want)
		}
		if r.at != 2370*time.Millisecond {
			t.Errorf("waiter acquired at %v, want 2.37s (the background release)", r.at)
		}
		r.lk.Release(ctx)
	})
}

// TestTimingBackgroundReleaseGivesUp pins down the end of background
// retries ("until confirmed or the lease has surely ended"): a release
// refused for good is retried for a minute (at least twice the ttl), then
// dropped, after which Close has nothing to wait for.
func TestTimingBackgroundReleaseGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		lk, err := c.TryAcquire(ctx, "k", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Release, Refuse: true})
		if err := lk.Release(ctx); !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("Release: %v, want ErrUnavailable", err)
		}
		e.sleepUntil(5 * time.Minute)
		at := e.b.at(memorybackend.Release)
		if last := at[len(at)-1]; last < time.Minute || last > time.Minute+time.Second {
			t.Errorf("last background release attempt at %v, want within a second after 1m", last)
		}
		if n := len(at); n > 70 {
			t.Errorf("%d release attempts, want about one a second for a minute", n)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v, want nil (nothing pending)", err)
		}
		if at := e.now(); at != 5*time.Minute {
			t.Errorf("Close returned at %v, want at once", at)
		}
	})
}

// TestTimingCloseWaitsForBackgroundReleases pins down Close and the
// background releases: Close waits for them up to its release timeout (5s)
// and reports those not confirmed; when the backend comes back in time, it
// returns as soon as they are done, with no error.
func TestTimingCloseWaitsForBackgroundReleases(t *testing.T) {
	for _, back := range []bool{false, true} {
		name := "backend stays down"
		if back {
			name = "backend back at 3s"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("a")
				ctx := context.Background()
				lk, err := c.TryAcquire(ctx, "k", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				clear := e.b.Inject(memorybackend.Fault{Ops: memorybackend.Release, Refuse: true})
				if err := lk.Release(ctx); !errors.Is(err, fencelock.ErrUnavailable) {
					t.Fatalf("Release: %v, want ErrUnavailable", err)
				}
				if back {
					var wg sync.WaitGroup
					defer wg.Wait()
					wg.Go(func() {
						time.Sleep(3 * time.Second)
						clear()
					})
				}
				e.sleepUntil(time.Second)
				err = c.Close()
				at := e.now()
				if back {
					// Background attempts at 0, 10, 30, 70, 150, 310, 630,
					// 1270, 2270, 3270ms: the last one succeeds.
					if err != nil || at != 3270*time.Millisecond {
						t.Errorf("Close at %v: %v, want nil at 3.27s", at, err)
					}
					if st := e.state("k"); st.Held() {
						t.Errorf("still held: %+v", st.Holds)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), "not confirmed") {
					t.Errorf("Close: %v, want an error reporting the unconfirmed release", err)
				}
				if at != 6*time.Second {
					t.Errorf("Close returned at %v, want 6s (its 5s release timeout)", at)
				}
				if !e.state("k").Held() {
					t.Error("the hold is gone although no release was applied")
				}
			})
		})
	}
}

// TestTimingCloseKeepsRenewingDuringCall pins down that, while
// Close waits for a slow call in flight (Lock.TTL or Lock.Refresh of another
// lock, its reply taking 5s), the Client's locks go on being renewed, so
// none lapses; Close then releases them (Err matches ErrReleased and
// ErrClosed, not ErrLost).
func TestTimingCloseKeepsRenewingDuringCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   memorybackend.Op
		call func(ctx context.Context, lk *fencelock.Lock) error
	}{
		{"TTL", memorybackend.TTL, func(ctx context.Context, lk *fencelock.Lock) error {
			_, err := lk.TTL(ctx)
			return err
		}},
		{"Refresh", memorybackend.Renew, func(ctx context.Context, lk *fencelock.Lock) error {
			return lk.Refresh(ctx, 10*time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("a")
				ctx := context.Background()
				slow, err := c.TryAcquire(ctx, "slow", 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				e.b.Inject(memorybackend.Fault{Ops: tc.op, Times: 1, ReplyDelay: 5 * time.Second})
				callDone := make(chan error, 1)
				go func() { callDone <- tc.call(ctx, slow) }()
				e.sleepUntil(100 * time.Millisecond)
				if err := c.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				if at := e.now(); at != 5*time.Second {
					t.Errorf("Close returned at %v, want 5s (after the call in flight)", at)
				}
				if err := <-callDone; err != nil {
					t.Errorf("%s: %v", tc.name, err)
				}
				for _, l := range []*fencelock.Lock{slow, lk} {
					if err := l.Err(); !errors.Is(err, fencelock.ErrReleased) || !errors.Is(err, fencelock.ErrClosed) || errors.Is(err, fencelock.ErrLost) {
						t.Errorf("%s: Err after Close = %v, want ErrReleased and ErrClosed, not ErrLost", l.Key(), err)
					}
				}
				renewals := e.b.renewBatches()
				if tc.op == memorybackend.Renew {
					renewals = renewals[1:] // the Refresh
				}
				if n := len(renewals); n != 16 {
					t.Errorf("%d renewals while Close waited, want 16 (every 300ms up to 4.8s)", n)
				}
				for _, key := range []string{"slow", "k"} {
					if st := e.state(key); st.Held() {
						t.Errorf("%s still held after Close: %+v", key, st.Holds)
					}
				}
			})
		})
	}
}

// TestTimingCloseDuringDo pins down Close during Do, and Do's promise
// that overlapping work is reported: when Close is called while Do's fn
// runs, either Close waits for Do (the lock stays held, and renewed, until
// fn returns), or, if it releases the lock under fn and another client then
// takes it while fn still runs, Do's error matches ErrLost. It must not let
// fn's work overlap another holder's silently.
func TestTimingCloseDuringDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		other := e.client("b")
		ctx := context.Background()
		doErr := make(chan error, 1)
		go func() {
			doErr <- c.Do(ctx, "k", time.Second, func(context.Context, *fencelock.Lock) error {
				time.Sleep(time.Second) // a step that does not watch its context
				return nil
			})
		}()
		e.sleepUntil(100 * time.Millisecond)
		closed := make(chan error, 1)
		go func() { closed <- c.Close() }()
		e.sleepUntil(200 * time.Millisecond)
		ol, err := other.TryAcquire(ctx, "k", time.Minute)
		overlap := err == nil // fn runs until 1s
		if err := <-doErr; overlap && !errors.Is(err, fencelock.ErrLost) {
			t.Errorf("Close (at 100ms) released the lock under Do's fn; another client held it from 200ms while fn ran until 1s, yet Do returned %v, which does not match ErrLost", err)
		}
		<-closed
		if ol != nil {
			ol.Release(ctx)
		}
	})
}

// TestTimingCloseCutsAcquireInFlight pins down that Close
// cuts an acquire attempt in flight at once (ErrNotAcquired matching
// ErrClosed), and the hold the attempt may have made is released with a
// tombstone, whether the request was already applied (slow reply) or lands
// later (slow request).
func TestTimingCloseCutsAcquireInFlight(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault memorybackend.Fault
	}{
		{"reply delayed", memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, ReplyDelay: 5 * time.Second}},
		{"request delayed", memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, RequestDelay: 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("a")
				e.b.Inject(tc.fault)
				res := e.goAcquire(context.Background(), c, "k", 10*time.Second)
				e.sleepUntil(100 * time.Millisecond)
				closed := make(chan error, 1)
				go func() { closed <- c.Close() }()
				r := <-res
				if r.lk != nil {
					t.Fatal("Acquire returned a lock after Close")
				}
				if r.at != 100*time.Millisecond || !errors.Is(r.err, fencelock.ErrClosed) || !errors.Is(r.err, fencelock.ErrNotAcquired) {
					t.Errorf("Acquire at %v: %v, want ErrNotAcquired with ErrClosed at 100ms", r.at, r.err)
				}
				if err := <-closed; err != nil {
					t.Errorf("Close: %v", err)
				}
				synctest.Wait()
				e.sleepUntil(6 * time.Second) // after the delayed request landed
				st := e.state("k")
				if st.Held() || tmTombstone(st, "a1") == 0 {
					t.Errorf("after Close: holds %v, tombstones %+v; want free, tombstone for a1", tmHoldTokens(st), st.Tombstones)
				}
			})
		})
	}
}

// TestTimingLapsedReentrantHold pins down that a re-entrant hold
// (WithOwner) that lapses locally is released in the background at its
// deadline, so it neither keeps the lock nor counts in later re-entries;
// releasing the outer hold then frees the lock.
func TestTimingLapsedReentrantHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		other := e.client("b")
		ctx := fencelock.WithOwner(context.Background(), "job")
		outer, err := c.Acquire(ctx, "k", 10*time.Second, fencelock.WithAutoRenew(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.Acquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if inner.Holds() != 2 || inner.Fence() != outer.Fence() {
			t.Fatalf("inner: %d holds, fence %d; want 2, %d", inner.Holds(), inner.Fence(), outer.Fence())
		}
		<-inner.Done()
		if at := e.now(); at != 900*time.Millisecond || !errors.Is(inner.Err(), fencelock.ErrLost) {
			t.Errorf("inner lost at %v (%v), want ErrLost at 900ms", at, inner.Err())
		}
		synctest.Wait()
		if st := e.state("k"); !slices.Equal(tmHoldTokens(st), []string{"a1"}) {
			t.Errorf("holds after the inner lapsed: %v, want only the outer a1", tmHoldTokens(st))
		}
		if !outer.Held() {
			t.Errorf("outer: %v", outer.Err())
		}
		e.sleepUntil(2 * time.Second)
		again, err := c.Acquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if again.Holds() != 2 {
			t.Errorf("re-entry after the lapse: %d holds, want 2", again.Holds())
		}
		if err := again.Release(ctx); err != nil {
			t.Errorf("Release re-entry: %v", err)
		}
		if err := outer.Release(ctx); err != nil {
			t.Errorf("Release outer: %v", err)
		}
		if st := e.state("k"); st.Held() {
			t.Errorf("still held after releasing the outer: %v", tmHoldTokens(st))
		}
		lk, err := other.TryAcquire(context.Background(), "k", time.Second)
		if err != nil {
			t.Fatalf("another client after the outer's release: %v", err)
		}
		lk.Release(ctx)
	})
}

// tmNoPanic runs f, reporting a panic as a failure of the named method.
func tmNoPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", name, r)
		}
	}()
	f()
}

// TestTimingNilAndClosed pins down that every method of a nil
// *Lock and of a nil *Client returns an error (or a zero value, a closed
// Done), never panics; after Close, every method of a Lock the Client held
// and of the Client reports the end.
func TestTimingNilAndClosed(t *testing.T) {
	ctx := context.Background()
	t.Run("nil Lock", func(t *testing.T) {
		var lk *fencelock.Lock
		tmNoPanic(t, "accessors", func() {
			if lk.Key() != "" || lk.Token() != "" || lk.Fence() != 0 || lk.Holds() != 0 || lk.Held() || !lk.Deadline().IsZero() {
				t.Error("nil Lock: non-zero accessor")
			}
		})
		tmNoPanic(t, "Done", func() {
			if !tmIsClosed(lk.Done()) {
				t.Error("nil Lock: Done not closed")
			}
		})
		tmNoPanic(t, "Err", func() {
			if lk.Err() == nil {
				t.Error("nil Lock: Err nil")
			}
		})
		tmNoPanic(t, "TTL", func() {
			if _, err := lk.TTL(ctx); err == nil {
				t.Error("nil Lock: TTL nil error")
			}
		})
		tmNoPanic(t, "Refresh", func() {
			if err := lk.Refresh(ctx, time.Second); err == nil {
				t.Error("nil Lock: Refresh nil error")
			}
		})
		tmNoPanic(t, "Release", func() {
			if err := lk.Release(ctx); err == nil {
				t.Error("nil Lock: Release nil error")
			}
		})
		tmNoPanic(t, "Context", func() {
			lctx, cancel := lk.Context(ctx)
			defer cancel()
			if !tmIsClosed(lctx.Done()) || context.Cause(lctx) == nil {
				t.Error("nil Lock: Context not cancelled")
			}
		})
	})
	t.Run("nil Client", func(t *testing.T) {
		var c *fencelock.Client
		tmNoPanic(t, "TryAcquire", func() {
			if _, err := c.TryAcquire(ctx, "k", time.Second); err == nil {
				t.Error("TryAcquire: nil error")
			}
		})
		tmNoPanic(t, "Acquire", func() {
			if _, err := c.Acquire(ctx, "k", time.Second); err == nil {
				t.Error("Acquire: nil error")
			}
		})
		tmNoPanic(t, "Do", func() {
			if err := c.Do(ctx, "k", time.Second, func(context.Context, *fencelock.Lock) error { return nil }); err == nil {
				t.Error("Do: nil error")
			}
		})
		tmNoPanic(t, "Close", func() {
			if err := c.Close(); err == nil {
				t.Error("Close: nil error")
			}
		})
	})
	t.Run("after Close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := tmNewEnv(t)
			c := e.client("a")
			lk, err := c.TryAcquire(ctx, "k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := lk.Err(); !errors.Is(err, fencelock.ErrReleased) || !errors.Is(err, fencelock.ErrClosed) {
				t.Errorf("Err = %v", err)
			}
			if lk.Held() || !tmIsClosed(lk.Done()) {
				t.Error("Held or Done open after Close")
			}
			if _, err := lk.TTL(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
				t.Errorf("TTL: %v, want ErrNotHeld", err)
			}
			if err := lk.Refresh(ctx, time.Second); !errors.Is(err, fencelock.ErrNotHeld) {
				t.Errorf("Refresh: %v, want ErrNotHeld", err)
			}
			if err := lk.Release(ctx); !errors.Is(err, fencelock.ErrClosed) {
				t.Errorf("Release: %v, want ErrClosed", err)
			}
			lctx, cancel := lk.Context(ctx)
			defer cancel()
			if !errors.Is(context.Cause(lctx), fencelock.ErrReleased) {
				t.Errorf("Context cause: %v", context.Cause(lctx))
			}
			if _, err := c.TryAcquire(ctx, "k", time.Second); !errors.Is(err, fencelock.ErrClosed) {
				t.Errorf("TryAcquire: %v, want ErrClosed", err)
			}
			if _, err := c.Acquire(ctx, "k", time.Second); !errors.Is(err, fencelock.ErrClosed) {
				t.Errorf("Acquire: %v, want ErrClosed", err)
			}
			if err := c.Do(ctx, "k", time.Second, func(context.Context, *fencelock.Lock) error { return nil }); !errors.Is(err, fencelock.ErrClosed) {
				t.Errorf("Do: %v, want ErrClosed", err)
			}
			if err := c.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if calls := e.b.Calls(memorybackend.AllOps); calls.Attempted != 2 {
				t.Errorf("backend calls: %+v, want 2 (the acquire and Close's release)", calls)
			}
		})
	})
}

// TestTimingFenceFloorAcrossForgetfulStore pins down that a
// store that forgot its last fences (a promoted replica that missed them)
// must not hand out a fence lower than one the Client has already seen:
// every acquire carries the Client's largest fence as a floor.
func TestTimingFenceFloorAcrossForgetfulStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("a")
		ctx := context.Background()
		var last int64
		for range 5 {
			lk, err := c.TryAcquire(ctx, "k", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			last = lk.Fence()
			lk.Release(ctx)
		}
		e.b.ForgetFences(tmNS, "k", 1) // the failover lost the last four
		lk, err := c.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if lk.Fence() <= last {
			t.Fatalf("fence %d after the store forgot its fences, want above %d (seen before)", lk.Fence(), last)
		}
		lk.Release(ctx)

		// The floor spans keys: a fence seen on one key floors another.
		other, err := c.TryAcquire(ctx, "other", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if other.Fence() <= lk.Fence() {
			t.Fatalf("fence %d on another key, want above the Client's largest %d", other.Fence(), lk.Fence())
		}
		other.Release(ctx)
	})
}

// tmDeadlineBackend fails an acquire at once when its context's deadline
// has passed, whether or not the context's own timer has fired yet, as
// go-redis does: it sets the connection's deadline from the context's, and
// on a busy machine the i/o timeout can come before the timer.
type tmDeadlineBackend struct{ driver.Store }

func (b tmDeadlineBackend) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return driver.Result{}, fmt.Errorf("%w (write tcp: i/o timeout)", context.DeadlineExceeded)
	}
	return b.Store.Acquire(ctx, req)
}

// tmLateCtx has a deadline, but is done only when late is closed: a
// context whose timer has not run yet at its deadline.
type tmLateCtx struct {
	context.Context
	deadline time.Time
	late     chan struct{}
}

func (c *tmLateCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *tmLateCtx) Done() <-chan struct{}       { return c.late }
func (c *tmLateCtx) Err() error {
	select {
	case <-c.late:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestTimingWaitDeadlineIsNotAnOutage: a wait for a lock that was held at
// every answered attempt ends as not acquired (busy), even when the last
// attempt failed because the wait's deadline passed before its context's
// timer fired. Under load, the order service answered such a wait with 503
// "the lock service could not be reached" instead of "busy".
func TestTimingWaitDeadlineIsNotAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		bg := context.Background()
		if _, err := e.client("h").TryAcquire(bg, "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		waiter := fencelock.New(tmDeadlineBackend{e.b})
		t.Cleanup(func() { waiter.Close() })
		ctx := &tmLateCtx{Context: bg, deadline: time.Now().Add(50 * time.Millisecond), late: make(chan struct{})}
		time.AfterFunc(100*time.Millisecond, func() { close(ctx.late) })
		_, err := waiter.Acquire(ctx, "k", time.Second)
		var notAcquired *fencelock.NotAcquiredError
		if !errors.As(err, &notAcquired) || errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("Acquire = %v, want NotAcquiredError (the lock was held at every answered attempt)", err)
		}
	})
}

// TestTimingLateRenewalAfterLongerRefresh pins down a renewal whose outcome
// is unknown and which lands late, after a Refresh to a longer ttl: the
// store then sets the lease to the old, shorter ttl from its late arrival.
// The holder must not count on the longer lease while such a request may
// still land, or it believes it holds after the store has let the key go
// (here: renewals refused after the late landing, another client takes the
// key when the short lease ends).
func TestTimingLateRenewalAfterLongerRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		a, b := e.client("a"), e.client("b")
		ctx := context.Background()
		lk, err := a.TryAcquire(ctx, "k", 300*time.Millisecond, fencelock.WithAutoRenew(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		// The renewal sent at 100ms times out at 150ms, but lands at 500ms
		// and sets the lease to 300ms from there: until 800ms.
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 1, RequestDelay: 400 * time.Millisecond})
		e.sleepUntil(160 * time.Millisecond)
		if err := lk.Refresh(ctx, 2*time.Second); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		e.checkLateLeaseEnd(ctx, lk, b, "renewal")
	})
}

// TestTimingLateAttemptAfterLongerRefresh is the same for an acquisition:
// an attempt of the waiter that timed out lands after a later attempt took
// the lock and a Refresh lengthened its lease; being the same token's, it
// is applied as a retry and sets the lease back to the acquisition's ttl.
func TestTimingLateAttemptAfterLongerRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		a, b := e.client("a"), e.client("b")
		ctx := context.Background()
		// The first attempt, sent at 0, is given up at 270ms (no reply
		// within the local lease) and lands at 500ms.
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Times: 1, RequestDelay: 500 * time.Millisecond})
		lk, err := a.Acquire(ctx, "k", 300*time.Millisecond, fencelock.WithWait(2*time.Second), fencelock.WithAutoRenew(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if at := e.now(); at >= 400*time.Millisecond {
			t.Fatalf("acquired at %v, want before the late attempt lands at 500ms", at)
		}
		if err := lk.Refresh(ctx, 2*time.Second); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		e.checkLateLeaseEnd(ctx, lk, b, "attempt")
	})
}

// checkLateLeaseEnd ends the two tests above: a late request for lk's key
// lands at 500ms and sets its lease to 300ms from there. With renewals
// refused from 490ms, the store lets the key go at 800ms, and by then the
// holder must no longer believe it holds, and another client gets the key.
func (e *tmEnv) checkLateLeaseEnd(ctx context.Context, lk *fencelock.Lock, other *fencelock.Client, late string) {
	t := e.t
	t.Helper()
	e.sleepUntil(490 * time.Millisecond)
	e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Refuse: true})
	e.sleepUntil(801 * time.Millisecond)
	if st := e.state("k"); st.Held() {
		t.Fatalf("at 801ms the store still holds %+v, want the late %s's lease ended at 800ms", st.Holds, late)
	}
	if lk.Held() {
		t.Errorf("the holder still believes it holds (deadline %v) after the store's lease ended at 800ms",
			lk.Deadline().Sub(e.start))
	}
	if _, err := other.TryAcquire(ctx, "k", time.Second); err != nil {
		t.Errorf("another client after the lease ended: %v", err)
	}
}
