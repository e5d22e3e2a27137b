package fencelock_test

// Deterministic tests of the lease keeper's schedule (internal/lease) on
// virtual time (testing/synctest) over memorybackend: which locks each
// renewal call carries and when it is made, batches and how many are in
// flight, releases and losses while renewals wait or are in flight, and the
// order and instant of loss signals.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// kpCall is one Renew call: when it was made and the keys it renewed.
type kpCall struct {
	at   time.Duration
	keys []string
}

func (c kpCall) String() string {
	return fmt.Sprintf("%v%v", c.at, c.keys)
}

// kpBackend is a memorybackend.Backend that records the Renew calls and
// how many were in flight at once.
type kpBackend struct {
	*memorybackend.Backend
	start time.Time

	mu          sync.Mutex
	calls       []kpCall
	inflight    int
	maxInflight int
}

func (b *kpBackend) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	b.mu.Lock()
	b.calls = append(b.calls, kpCall{at: time.Since(b.start), keys: keys})
	b.inflight++
	b.maxInflight = max(b.maxInflight, b.inflight)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inflight--
		b.mu.Unlock()
	}()
	return b.Backend.Renew(ctx, reqs)
}

// renewCalls returns the Renew calls made so far.
func (b *kpBackend) renewCalls() []kpCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// kpEnv is one bubble's backend and Client.
type kpEnv struct {
	t *testing.T
	b *kpBackend
	c *fencelock.Client
}

// kpNewEnv makes a backend and a Client (tokens a1, a2, ...) inside the
// bubble, both closed at cleanup.
func kpNewEnv(t *testing.T, opts ...fencelock.Option) *kpEnv {
	t.Helper()
	b := &kpBackend{Backend: memorybackend.New(), start: time.Now()}
	t.Cleanup(func() { b.Close() })
	var mu sync.Mutex
	n := 0
	gen := fencelock.WithTokenGenerator(func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("a%d", n), nil
	})
	c := fencelock.New(tmShared{b, b.Backend, b.Backend}, append([]fencelock.Option{gen}, opts...)...)
	t.Cleanup(func() { c.Close() })
	return &kpEnv{t: t, b: b, c: c}
}

func (e *kpEnv) now() time.Duration { return time.Since(e.b.start) }

func (e *kpEnv) sleepUntil(d time.Duration) {
	e.t.Helper()
	if now := e.now(); d < now {
		e.t.Fatalf("sleepUntil(%v): already at %v", d, now)
	}
	time.Sleep(d - e.now())
}

// acquire takes key at the current instant.
func (e *kpEnv) acquire(key string, ttl time.Duration, opts ...fencelock.AcquireOption) *fencelock.Lock {
	e.t.Helper()
	lk, err := e.c.TryAcquire(context.Background(), key, ttl, opts...)
	if err != nil {
		e.t.Fatalf("TryAcquire %s: %v", key, err)
	}
	return lk
}

// TestKeeperRenewalOrderAndTiming pins down the schedule with locks of
// different intervals: each is renewed when due, in due order, and a lock
// due within a fifth of its interval goes along, early, only with a renewal
// call that is made anyway; each renewal moves the deadline to its send
// time + ttl - margin.
func TestKeeperRenewalOrderAndTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		// A: every 300ms from 0 (window 60ms). B: every 500ms (window
		// 100ms) from 150ms. C: every 900ms (window 180ms) from 250ms.
		a := e.acquire("A", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		e.sleepUntil(150 * time.Millisecond)
		b := e.acquire("B", 2*time.Second, fencelock.WithAutoRenew(500*time.Millisecond))
		e.sleepUntil(250 * time.Millisecond)
		c := e.acquire("C", 3*time.Second, fencelock.WithAutoRenew(900*time.Millisecond))
		e.sleepUntil(1650 * time.Millisecond)

		want := []string{
			"300ms[A]",
			"600ms[A B]", // B due at 650ms goes along, 50ms early; C (1.15s) is too early
			"900ms[A]",   // B due at 1.1s: too early
			"1.1s[B C]",  // C due at 1.15s goes along; A (1.2s) is too early
			"1.2s[A]",    //
			"1.5s[A B]",  // B due at 1.6s: at the edge of its window
		}
		if got := fmtCalls(e.b.renewCalls()); !slices.Equal(got, want) {
			t.Errorf("renew calls\n got %v\nwant %v", got, want)
		}
		for _, x := range []struct {
			lk       *fencelock.Lock
			deadline time.Duration
		}{{a, 2400 * time.Millisecond}, {b, 3300 * time.Millisecond}, {c, 3800 * time.Millisecond}} {
			if err := x.lk.Err(); err != nil {
				t.Errorf("%s: %v", x.lk.Key(), err)
			}
			if got := x.lk.Deadline().Sub(e.b.start); got != x.deadline {
				t.Errorf("%s: deadline at %v, want %v", x.lk.Key(), got, x.deadline)
			}
		}
	})
}

// acquireOneAMillisecond takes n locks, k000, k001, ..., one a millisecond
// from the current instant (0), each with a lease of 3s renewed every
// second: they come due one a millisecond from 1s.
func (e *kpEnv) acquireOneAMillisecond(n int) {
	e.t.Helper()
	for i := range n {
		e.sleepUntil(time.Duration(i) * time.Millisecond)
		e.acquire(fmt.Sprintf("k%03d", i), 3*time.Second, fencelock.WithAutoRenew(time.Second))
	}
}

// checkBatchesRenewingEachOnce checks that calls, rendered "at[batch
// size]", are want, and that they renewed each of n locks once.
func checkBatchesRenewingEachOnce(t *testing.T, calls []kpCall, want []string, n int) {
	t.Helper()
	var got []string
	renewed := map[string]int{}
	for _, c := range calls {
		got = append(got, fmt.Sprintf("%v[%d]", c.at, len(c.keys)))
		for _, k := range c.keys {
			renewed[k]++
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("renew calls %v, want %v", got, want)
	}
	if len(renewed) != n {
		t.Errorf("%d locks renewed, want all %d", len(renewed), n)
	}
	for k, times := range renewed {
		if times != 1 {
			t.Errorf("%s renewed %d times, want once", k, times)
		}
	}
}

// TestKeeperSteadyStreamRenewedInBursts: locks taken one a millisecond come
// due one a millisecond. The wake-up that renews the first one also takes
// those due within a fifth of their interval, up to RenewBurst batches,
// which go out one at a time (only the first has a lock that is due): a
// round of renewals costs the loop a few wake-ups, not one per batch, and
// another request waits behind one batch at most.
func TestKeeperSteadyStreamRenewedInBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		const n = 300
		e.acquireOneAMillisecond(n)
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 100, ReplyDelay: time.Millisecond})
		e.sleepUntil(1500 * time.Millisecond)

		// At 1000ms: k000 is due, k001..k200 (due by 1200ms) go along, 201
		// locks in batches of 64, one after the other. At 1201ms: k201 is
		// due, and the other 98 go along.
		want := []string{"1s[64]", "1.001s[64]", "1.002s[64]", "1.003s[9]", "1.201s[64]", "1.202s[35]"}
		checkBatchesRenewingEachOnce(t, e.b.renewCalls(), want, n)
		if e.b.maxInflight != 1 {
			t.Errorf("%d renew calls in flight at once, want 1 (none of the later batches was due)", e.b.maxInflight)
		}
	})
}

// TestKeeperBurstFallingBehindGetsSecondWorker: when the server answers
// slowly, the batches of locks taken early come due while they wait for
// the one worker; a second then sends them meanwhile (at most
// MaxRenewWorkers in flight), so that no lock waits for its renewal past
// one batch's round trip after it came due.
func TestKeeperBurstFallingBehindGetsSecondWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		const n = 300
		e.acquireOneAMillisecond(n)
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 100, ReplyDelay: 100 * time.Millisecond})
		e.sleepUntil(1500 * time.Millisecond)

		// At 1000ms the burst k000..k200 is gathered: [k000..k063]
		// [k064..k127] [k128..k191] [k192..k200]. The first goes at once;
		// the second at 1100ms, when its first lock (due at 1064ms) has
		// come due but no other batch had; at 1200ms the third, and the
		// fourth (due since 1192ms) beside it. At 1201ms k201 is due and
		// the rest is gathered: [k201..k264] [k265..k299], sent at 1300ms,
		// when both workers are free.
		want := []string{"1s[64]", "1.1s[64]", "1.2s[9]", "1.2s[64]", "1.3s[35]", "1.3s[64]"}
		calls := e.b.renewCalls()
		// Calls made at the same instant, in any order.
		slices.SortStableFunc(calls, func(a, b kpCall) int {
			return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(len(a.keys), len(b.keys)))
		})
		checkBatchesRenewingEachOnce(t, calls, want, n)
		if e.b.maxInflight != fencelock.MaxRenewWorkers {
			t.Errorf("%d renew calls in flight at once, want %d", e.b.maxInflight, fencelock.MaxRenewWorkers)
		}
	})
}

// TestKeeperExpiryDoesNotPullRenewals: a wake-up for a deadline alone
// sends no renewal, not even of a lock due within its window: locks go
// along early only to share a round trip that is made anyway.
func TestKeeperExpiryDoesNotPullRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		d := e.acquire("D", time.Second) // no renewal: lost at 900ms
		e.sleepUntil(50 * time.Millisecond)
		e.acquire("R", time.Second, fencelock.WithAutoRenew(300*time.Millisecond)) // due 350, 650, 950ms
		<-d.Done()
		if at := e.now(); at != 900*time.Millisecond {
			t.Errorf("D lost at %v, want 900ms", at)
		}
		e.sleepUntil(1000 * time.Millisecond)
		want := []string{"350ms[R]", "650ms[R]", "950ms[R]"}
		if got := fmtCalls(e.b.renewCalls()); !slices.Equal(got, want) {
			t.Errorf("renew calls %v, want %v", got, want)
		}
	})
}

// fmtCalls renders calls as "at[keys]", keys sorted.
func fmtCalls(calls []kpCall) []string {
	var s []string
	for _, c := range calls {
		keys := slices.Sorted(slices.Values(c.keys))
		s = append(s, fmt.Sprintf("%v[%s]", c.at, strings.Join(keys, " ")))
	}
	return s
}

// TestKeeperManyDueSplitIntoBatches: locks that come due together are
// renewed in calls of at most MaxRenewBatch, at most MaxRenewWorkers in
// flight at once (the next goes when one answers), each lock once per
// round, by a few goroutines whatever the number of locks.
func TestKeeperManyDueSplitIntoBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		const n = fencelock.MaxRenewWorkers*fencelock.MaxRenewBatch + 52
		goroutines := runtime.NumGoroutine()
		locks := make([]*fencelock.Lock, n)
		for i := range locks {
			locks[i] = e.acquire(fmt.Sprintf("k%04d", i), time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: fencelock.MaxRenewWorkers + 1, ReplyDelay: 10 * time.Millisecond})
		e.sleepUntil(305 * time.Millisecond)
		if extra := runtime.NumGoroutine() - goroutines; extra > 8 {
			t.Errorf("%d more goroutines with %d locks and renewals in flight, want a few", extra, n)
		}
		e.sleepUntil(350 * time.Millisecond)

		calls := e.b.renewCalls()
		var at []time.Duration
		var sizes []int
		seen := map[string]int{}
		for _, c := range calls {
			at = append(at, c.at)
			sizes = append(sizes, len(c.keys))
			for _, k := range c.keys {
				seen[k]++
			}
		}
		ms := time.Millisecond
		var wantAt []time.Duration
		var wantSizes []int
		for range fencelock.MaxRenewWorkers {
			wantAt = append(wantAt, 300*ms)
			wantSizes = append(wantSizes, fencelock.MaxRenewBatch)
		}
		wantAt = append(wantAt, 310*ms)
		wantSizes = append(wantSizes, 52)
		if !slices.Equal(at, wantAt) {
			t.Errorf("renew calls at %v, want %v (%d at once, the next when one answered)", at, wantAt, fencelock.MaxRenewWorkers)
		}
		if !slices.Equal(sizes, wantSizes) {
			t.Errorf("batch sizes %v, want %v", sizes, wantSizes)
		}
		if e.b.maxInflight != fencelock.MaxRenewWorkers {
			t.Errorf("%d renew calls in flight at once, want %d", e.b.maxInflight, fencelock.MaxRenewWorkers)
		}
		if len(seen) != n {
			t.Errorf("%d locks renewed, want %d", len(seen), n)
		}
		for k, c := range seen {
			if c != 1 {
				t.Errorf("%s renewed %d times in one round", k, c)
			}
		}
		// Each deadline counts from its own batch's send time.
		last := map[string]bool{}
		for _, k := range calls[fencelock.MaxRenewWorkers].keys {
			last[k] = true
		}
		for _, lk := range locks {
			want := 1200 * ms
			if last[lk.Key()] {
				want = 1210 * ms
			}
			if got := lk.Deadline().Sub(e.b.start); got != want {
				t.Fatalf("%s: deadline at %v, want %v", lk.Key(), got, want)
			}
		}
	})
}

// TestKeeperStalledBatchesDoNotHoldUpOthers: batches that get no answer
// (a paused node) stop counting against the bound of MaxRenewWorkers in
// flight after a quarter of their timeout (interval/2: 1.5s), so a batch waiting behind
// them goes then (375ms later), not when they time out or answer.
func TestKeeperStalledBatchesDoNotHoldUpOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		for i := range fencelock.MaxRenewWorkers*fencelock.MaxRenewBatch + 1 {
			e.acquire(fmt.Sprintf("k%04d", i), 10*time.Second, fencelock.WithAutoRenew(3*time.Second))
		}
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: fencelock.MaxRenewWorkers, ReplyDelay: time.Second})
		e.sleepUntil(3500 * time.Millisecond)
		var at []time.Duration
		for _, c := range e.b.renewCalls() {
			at = append(at, c.at)
		}
		var want []time.Duration
		for range fencelock.MaxRenewWorkers {
			want = append(want, 3*time.Second)
		}
		want = append(want, 3375*time.Millisecond)
		if !slices.Equal(at, want) {
			t.Errorf("renew calls at %v, want %v", at, want)
		}
	})
}

// TestKeeperReleaseWhileRenewalInFlight: a lock released while its renewal
// is on its way stays released when the reply comes (not lost, nothing
// logged), and is renewed no more.
func TestKeeperReleaseWhileRenewalInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost []string
		e := kpNewEnv(t, fencelock.WithLogger(slog.New(tmLossHandler{func(key string) { lost = append(lost, key) }})))
		ctx := context.Background()
		lk := e.acquire("k", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		other := e.acquire("o", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 1, ReplyDelay: 100 * time.Millisecond})
		e.sleepUntil(350 * time.Millisecond) // the renewal of both, sent at 300ms, answers at 400ms
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if at := e.now(); at != 350*time.Millisecond {
			t.Errorf("Release returned at %v, want at once", at)
		}
		e.sleepUntil(1000 * time.Millisecond)
		if err := lk.Err(); !errors.Is(err, fencelock.ErrReleased) || errors.Is(err, fencelock.ErrLost) {
			t.Errorf("Err = %v, want ErrReleased", err)
		}
		want := []string{"300ms[k o]", "600ms[o]", "900ms[o]"}
		if got := fmtCalls(e.b.renewCalls()); !slices.Equal(got, want) {
			t.Errorf("renew calls %v, want %v", got, want)
		}
		if st := e.b.State(tmNS, "k"); st.Held() {
			t.Errorf("k still held on the server: %+v", st.Holds)
		}
		if err := other.Err(); err != nil || len(lost) > 0 {
			t.Errorf("other lock: %v; lost: %v", err, lost)
		}
	})
}

// TestKeeperReleaseWhileRenewalQueued: a lock released while its renewal
// waits for a worker (MaxRenewWorkers batches in flight) is left out of
// the call.
func TestKeeperReleaseWhileRenewalQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		ctx := context.Background()
		for i := range fencelock.MaxRenewWorkers * fencelock.MaxRenewBatch {
			e.acquire(fmt.Sprintf("k%04d", i), time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		}
		e.sleepUntil(time.Millisecond)
		late := e.acquire("late", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: fencelock.MaxRenewWorkers, ReplyDelay: 50 * time.Millisecond})
		e.sleepUntil(320 * time.Millisecond) // late came due at 301ms, behind the batches in flight till 350ms
		if err := late.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		e.sleepUntil(400 * time.Millisecond)
		for _, c := range e.b.renewCalls() {
			if c.at != 300*time.Millisecond || len(c.keys) != fencelock.MaxRenewBatch {
				t.Errorf("renew call at %v with %d locks, want only the %d batches at 300ms", c.at, len(c.keys), fencelock.MaxRenewWorkers)
			}
		}
		if err := late.Err(); !errors.Is(err, fencelock.ErrReleased) {
			t.Errorf("Err = %v, want ErrReleased", err)
		}
	})
}

// TestKeeperSlowBatchDoesNotDelayLoss: the loss signal of a lock comes at
// its deadline while another lock's renewal is in flight, slow; the slow
// renewal then succeeds.
func TestKeeperSlowBatchDoesNotDelayLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		a := e.acquire("A", 10*time.Second, fencelock.WithAutoRenew(2*time.Second))
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Times: 1, ReplyDelay: 800 * time.Millisecond})
		e.sleepUntil(1500 * time.Millisecond)
		b := e.acquire("B", time.Second) // deadline 2.4s, during A's renewal (2s to 2.8s)
		<-b.Done()
		if at := e.now(); at != 2400*time.Millisecond {
			t.Errorf("B lost at %v, want 2.4s (its deadline)", at)
		}
		if err := b.Err(); !errors.Is(err, fencelock.ErrLost) {
			t.Errorf("B: %v, want ErrLost", err)
		}
		e.sleepUntil(2900 * time.Millisecond)
		if got := a.Deadline().Sub(e.b.start); got != 11*time.Second {
			t.Errorf("A's deadline at %v, want 11s (renewal sent at 2s + 9s)", got)
		}
		if err := a.Err(); err != nil {
			t.Errorf("A: %v", err)
		}
	})
}

// TestKeeperExpiryOrder: locks are declared lost in the order of their
// deadlines, each exactly at its deadline, whether they renew (the server
// refuses every renewal) or not.
func TestKeeperExpiryOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu   sync.Mutex
			lost []string
			e    *kpEnv
		)
		e = kpNewEnv(t, fencelock.WithLogger(slog.New(tmLossHandler{func(key string) {
			mu.Lock()
			lost = append(lost, fmt.Sprintf("%s@%v", key, e.now()))
			mu.Unlock()
		}})))
		e.b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Refuse: true})
		for _, x := range []struct {
			key string
			at  time.Duration
			ttl time.Duration
			opt fencelock.AcquireOption
		}{
			{"e1", 0, time.Second, nil},
			{"e2", 10 * time.Millisecond, 500 * time.Millisecond, nil},
			{"e3", 20 * time.Millisecond, 2 * time.Second, nil},
			{"e4", 30 * time.Millisecond, 100 * time.Millisecond, nil},
			{"e5", 40 * time.Millisecond, time.Second, nil},
			{"r1", 50 * time.Millisecond, time.Second, fencelock.WithAutoRenew(300 * time.Millisecond)},
			{"r2", 50 * time.Millisecond, 400 * time.Millisecond, fencelock.WithAutoRenew(100 * time.Millisecond)},
		} {
			e.sleepUntil(x.at)
			e.acquire(x.key, x.ttl, x.opt)
		}
		e.sleepUntil(2 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		want := []string{"e4@120ms", "r2@410ms", "e2@460ms", "e1@900ms", "e5@940ms", "r1@950ms", "e3@1.82s"}
		if !slices.Equal(lost, want) {
			t.Errorf("losses %v, want %v", lost, want)
		}
	})
}

// TestKeeperRefreshMovesTheSchedule: a Refresh to a shorter lease moves the
// lock's place in the schedule earlier: it is lost at the new deadline, not
// the old one; a Refresh of a renewed lock moves its next renewal.
func TestKeeperRefreshMovesTheSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		ctx := context.Background()
		short := e.acquire("short", 10*time.Second) // deadline 9s
		renewed := e.acquire("renewed", 10*time.Second, fencelock.WithAutoRenew(3*time.Second))
		lostAt := make(chan time.Duration, 1)
		go func() {
			<-short.Done()
			lostAt <- e.now()
		}()
		e.sleepUntil(100 * time.Millisecond)
		if err := short.Refresh(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		e.sleepUntil(2 * time.Second)
		if err := renewed.Refresh(ctx, 10*time.Second); err != nil { // next renewal at 5s, not 3s
			t.Fatal(err)
		}
		if at := <-lostAt; at != time.Second {
			t.Errorf("lost at %v, want 1s (the refreshed deadline)", at)
		}
		e.sleepUntil(5500 * time.Millisecond)
		if got, want := fmtCalls(e.b.renewCalls()), []string{"100ms[short]", "2s[renewed]", "5s[renewed]"}; !slices.Equal(got, want) {
			t.Errorf("renew calls %v, want %v", got, want)
		}
	})
}

// kpGoroutineBackend records which goroutine made each Renew call.
type kpGoroutineBackend struct {
	*kpBackend
	mu  sync.Mutex
	ids []string
}

func (b *kpGoroutineBackend) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	b.mu.Lock()
	b.ids = append(b.ids, id)
	b.mu.Unlock()
	return b.kpBackend.Renew(ctx, reqs)
}

// A steady stream of renewals is sent by the same worker goroutine, not by
// a new one per batch (each new goroutine grew its stack on the batch's way
// through the Redis client: a tenth of the keeper's CPU with 100,000 held
// locks); renewals further apart than workerLinger find the worker gone,
// so an idle Client keeps no worker.
func TestKeeperWorkerLingers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &kpGoroutineBackend{kpBackend: &kpBackend{Backend: memorybackend.New(), start: time.Now()}}
		t.Cleanup(func() { b.Close() })
		c := fencelock.New(tmShared{b, b.Backend, b.Backend})
		t.Cleanup(func() { c.Close() })
		ctx := context.Background()
		often, err := c.TryAcquire(ctx, "often", time.Second, fencelock.WithAutoRenew(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		// 7 renewals, 300ms apart. Release between two (not at 2.1s, when
		// the 7th is due: at the same virtual instant, its call could be
		// recorded after the reset below), and not at a look of the
		// keeper's (every 250ms).
		time.Sleep(2*time.Second + 200*time.Millisecond)
		often.Release(ctx)
		b.mu.Lock()
		steady := slices.Clone(b.ids)
		b.ids = nil
		b.mu.Unlock()
		if len(steady) < 5 || slices.ContainsFunc(steady, func(id string) bool { return id != steady[0] }) {
			t.Fatalf("renewals 300ms apart came from goroutines %v, want one worker for all", steady)
		}

		rare, err := c.TryAcquire(ctx, "rare", 6*time.Second, fencelock.WithAutoRenew(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(6*time.Second + 100*time.Millisecond) // 3 renewals, 2s apart
		rare.Release(ctx)
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.ids) != 3 || b.ids[0] == b.ids[1] || b.ids[1] == b.ids[2] || slices.Contains(b.ids, steady[0]) {
			t.Fatalf("renewals 2s apart came from goroutines %v (the steady worker was %s), want a new worker each time: an idle worker ends after a second", b.ids, steady[0])
		}
	})
}

// TestKeeperNotWokenByShortHolds checks that taking and releasing locks whose
// leases are long does not wake the keeper's loop: their first renewal or
// deadline comes after its planned look, so it finds them then (waking it
// on each Acquire while no other lock is held would cost a switch to
// another thread on every uncontended cycle). A lock due before that look
// still wakes it at once, and is renewed on time.
func TestKeeperNotWokenByShortHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := kpNewEnv(t)
		ctx := context.Background()
		synctest.Wait() // the loop has made its first look
		before := fencelock.KeeperPokes(e.c)
		for i := range 100 {
			opts := []fencelock.AcquireOption{}
			if i%2 == 0 {
				opts = append(opts, fencelock.WithAutoRenew(time.Second))
			}
			lk := e.acquire("short", 10*time.Second, opts...)
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		if woken := fencelock.KeeperPokes(e.c) - before; woken != 0 {
			t.Errorf("100 acquire+release cycles of locks with a 10s lease woke the keeper %d times, want 0", woken)
		}

		// A lock renewed every 100ms is due before the loop's next look.
		start := e.now()
		lk := e.acquire("often", time.Second, fencelock.WithAutoRenew(100*time.Millisecond))
		if fencelock.KeeperPokes(e.c) == before {
			t.Error("a lock due in 100ms did not wake the keeper")
		}
		time.Sleep(350 * time.Millisecond)
		calls := e.b.renewCalls()
		if len(calls) != 3 {
			t.Fatalf("renewal calls in 350ms of a lock renewed every 100ms: %v, want 3", calls)
		}
		for i, c := range calls {
			if want := start + time.Duration(i+1)*100*time.Millisecond; c.at != want {
				t.Errorf("renewal %d at %v, want %v", i+1, c.at, want)
			}
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
