package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// Deterministic tests of hand-offs (driver.Lines.HandOff): a release
// hands the lock to the next waiter of the same Client in one request. The
// real-server tests are in redisbackend/handoff_test.go.

// handOffEnv makes a memory backend and Clients on it whose tokens are
// name1, name2, ...
func handOffEnv(t *testing.T) (*memorybackend.Backend, func(name string, opts ...fencelock.Option) *fencelock.Client) {
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	return b, func(name string, opts ...fencelock.Option) *fencelock.Client {
		var n atomic.Int64
		gen := fencelock.WithTokenGenerator(func() (string, error) { return fmt.Sprintf("%s%d", name, n.Add(1)), nil })
		c := fencelock.New(handOffShared{b}, append([]fencelock.Option{gen}, opts...)...)
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// holdWithWaiter takes "k" for ttl with c, and starts a goroutine of c
// that waits for it, until it waits.
func holdWithWaiter(t *testing.T, c *fencelock.Client, ttl time.Duration) (holder *fencelock.Lock, waiter <-chan *fencelock.Lock) {
	t.Helper()
	holder, err := c.Acquire(context.Background(), "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	waiter = acquireAsync(t, c, "k", ttl)
	time.Sleep(100 * time.Millisecond)
	synctest.Wait()
	return holder, waiter
}

// handOffShared lets several Clients share the backend (it hides Close).
type handOffShared struct{ *memorybackend.Backend }

func (handOffShared) Close() error { return nil }

// A release hands the lock to the Client's waiting goroutine in the same
// request: the waiter holds it at the instant of the release, with a new
// fence, having made no acquire attempt at all (it joined the line while
// its Client held the lock), and its local deadline counts from when the
// release was sent.
func TestHandOffToWaiterOfSameClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		c := client("c")
		ctx := context.Background()
		const ttl = 10 * time.Second
		holder, err := c.Acquire(ctx, "k", ttl)
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, c, "k", ttl)
		time.Sleep(3 * time.Second) // longer than a few fallback timer rounds
		synctest.Wait()
		if n := b.Calls(memorybackend.Acquire).Attempted; n != 1 {
			t.Fatalf("%d acquire attempts while the Client held the lock, want 1 (the holder's): the waiter has nothing to attempt", n)
		}
		releasedAt := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		if !time.Now().Equal(releasedAt) {
			t.Fatalf("the waiter got the lock %v after the release, want at once", time.Since(releasedAt))
		}
		if n := b.Calls(memorybackend.Acquire).Attempted; n != 1 {
			t.Fatalf("%d acquire attempts, want 1: the release handed the lock over", n)
		}
		if b.HandOffs() != 1 {
			t.Fatalf("%d hand-offs, want 1", b.HandOffs())
		}
		if lk.Fence() <= holder.Fence() {
			t.Fatalf("handed fence %d, want above the holder's %d", lk.Fence(), holder.Fence())
		}
		if s := b.State(tmNS, "k"); len(s.Holds) != 1 || s.Holds[0].Token != lk.Token() || s.Fence != lk.Fence() {
			t.Fatalf("store after the hand-off: %+v, want one hold by %s with fence %d", s, lk.Token(), lk.Fence())
		}
		if d := lk.Deadline().Sub(releasedAt); d <= 0 || d > ttl {
			t.Fatalf("handed lock's local deadline %v after the release, want within the ttl %v", d, ttl)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if s := b.State(tmNS, "k"); s.Held() {
			t.Fatalf("store after the last release: %+v, want free", s)
		}
	})
}

// Goroutines of one Client get the lock in the order they asked, each by a
// hand-off, and no two hold it at once.
func TestHandOffLineInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		c := client("c")
		ctx := context.Background()
		holder, err := c.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		const n = 5
		order := make(chan int, n)
		var inside atomic.Int32
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				lk, err := c.Acquire(ctx, "k", time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two goroutines hold the lock at once")
				}
				order <- i
				time.Sleep(10 * time.Millisecond)
				inside.Add(-1)
				if err := lk.Release(ctx); err != nil {
					t.Error(err)
				}
			})
			time.Sleep(time.Millisecond) // i asks before i+1
			synctest.Wait()
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for want := range n {
			if got := <-order; got != want {
				t.Fatalf("goroutine %d got the lock in turn %d", got, want)
			}
		}
		wg.Wait()
		if b.HandOffs() != n {
			t.Fatalf("%d hand-offs, want %d", b.HandOffs(), n)
		}
		if a := b.Calls(memorybackend.Acquire).Attempted; a != 1 {
			t.Fatalf("%d acquire attempts, want only the first holder's", a)
		}
	})
}

// A waiter of another Client (process) that was refused while the lock was
// held is not passed over: the release frees the lock and wakes it, and the
// Client's own waiter takes its chance with it.
func TestHandOffNotPastAnotherProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		local, other := client("c"), client("o")
		ctx := context.Background()
		holder, err := local.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		mine := acquireAsync(t, local, "k", time.Minute)
		theirs := acquireAsync(t, other, "k", time.Minute)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if b.HandOffs() != 0 {
			t.Fatalf("%d hand-offs, want none: another process's waiter was refused while the lock was held", b.HandOffs())
		}
		// Both were woken; one of them gets it, then the other.
		var first *fencelock.Lock
		select {
		case first = <-mine:
		case first = <-theirs:
		}
		if first == nil {
			t.FailNow()
		}
		first.Release(ctx)
		var second *fencelock.Lock
		select {
		case second = <-mine:
		case second = <-theirs:
		}
		if second == nil || second.Fence() <= first.Fence() {
			t.Fatalf("second holder %v, want a lock with a fence above %d", second, first.Fence())
		}
		second.Release(ctx)
	})
}

// A waiter that gives up while a release that may hand it the lock is in
// flight leaves nothing locked: the hand-off either never happens (its
// token's tombstone refuses it) or is released again.
func TestHandOffToWaiterThatGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		c := client("c")
		ctx := context.Background()
		holder, err := c.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		gaveUp := make(chan error, 1)
		go func() {
			_, err := c.Acquire(wctx, "k", time.Minute)
			gaveUp <- err
		}()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		// The release reaches the store after the waiter has given up.
		b.Inject(memorybackend.Fault{Ops: memorybackend.Release, Times: 1, RequestDelay: time.Second})
		released := make(chan error, 1)
		go func() { released <- holder.Release(ctx) }()
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiter: %v, want context.Canceled", err)
		}
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second) // the background release of the waiter's token
		synctest.Wait()
		if s := b.State(tmNS, "k"); s.Held() {
			t.Fatalf("store after the waiter gave up: %+v, want free", s)
		}
		if lk, err := client("x").TryAcquire(ctx, "k", time.Second); err != nil {
			t.Fatalf("TryAcquire after the waiter gave up: %v", err)
		} else {
			lk.Release(ctx)
		}
	})
}

// A release whose reply is lost may have handed the lock over: the waiter
// attempts at once, and its attempt (a retry with the same token) completes
// the hand-off with the fence it minted.
func TestHandOffReplyLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		c := client("c")
		ctx := context.Background()
		holder, got := holdWithWaiter(t, c, time.Minute)
		b.Inject(memorybackend.Fault{Ops: memorybackend.Release, Times: 1, LoseReply: true})
		holder.Release(ctx) // the second request finds the hold gone: released
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		if b.HandOffs() != 1 {
			t.Fatalf("%d hand-offs, want 1", b.HandOffs())
		}
		s := b.State(tmNS, "k")
		if len(s.Holds) != 1 || s.Holds[0].Token != lk.Token() || s.Fence != lk.Fence() || lk.Fence() <= holder.Fence() {
			t.Fatalf("store %+v, waiter's lock %s fence %d: want the handed hold, one, with a fence above %d",
				s, lk.Token(), lk.Fence(), holder.Fence())
		}
		lk.Release(ctx)
	})
}

// Without hand-offs (a backend that declines them), a release wakes the
// Client's waiter, which takes the lock with an attempt of its own.
func TestHandOffDeclined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		b.DisableHandOff()
		c := client("c")
		ctx := context.Background()
		holder, got := holdWithWaiter(t, c, time.Minute)
		releasedAt := time.Now()
		holder.Release(ctx)
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		if !time.Now().Equal(releasedAt) {
			t.Fatalf("the waiter got the lock %v after the release, want at once (woken by it)", time.Since(releasedAt))
		}
		if n := b.Calls(memorybackend.Acquire).Attempted; n != 2 {
			t.Fatalf("%d acquire attempts, want 2 (the holder's, the waiter's after the release)", n)
		}
		lk.Release(ctx)
	})
}

// A wait for a lock that another call of the same Client holds makes no
// attempt, and when it ends, its error says so.
func TestHandOffWaitEndsHeldHere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		c := client("c")
		if _, err := c.Acquire(context.Background(), "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Acquire(ctx, "k", time.Minute)
		var na *fencelock.NotAcquiredError
		if !errors.As(err, &na) || !na.HeldHere || na.Attempts != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire of a key its Client holds: %#v (%v), want NotAcquiredError with HeldHere, no attempt, DeadlineExceeded", na, err)
		}
		if !strings.Contains(err.Error(), "held by another call of this Client") {
			t.Fatalf("message %q does not say who holds the lock", err)
		}
		if n := b.Calls(memorybackend.Acquire).Attempted; n != 1 {
			t.Fatalf("%d acquire attempts, want only the holder's", n)
		}
	})
}

// A re-entrant waiter (WithOwner) of the Client that holds the lock is not
// one a hand-off can serve (the hand-off takes the lock for the waiter's
// token as its owner): the release frees the lock and wakes it, the release
// succeeds, and the waiter holds the lock at the instant of the release,
// as its owner. The same goes for Campaign, which waits as its candidate.
func TestHandOffReentrantWaiter(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait func(c *fencelock.Client) <-chan *fencelock.Lock
	}{
		{"WithOwner", func(c *fencelock.Client) <-chan *fencelock.Lock {
			got := make(chan *fencelock.Lock, 1)
			go func() {
				lk, err := c.Acquire(fencelock.WithOwner(context.Background(), "job-7"), "k", time.Minute, fencelock.WithWait(8*time.Second))
				if err != nil {
					t.Error(err)
				}
				got <- lk
			}()
			return got
		}},
		{"Campaign", func(c *fencelock.Client) <-chan *fencelock.Lock {
			got := make(chan *fencelock.Lock, 1)
			go func() {
				l, err := c.Campaign(context.Background(), "k", "job-7", time.Minute, fencelock.WithWait(8*time.Second))
				if err != nil {
					t.Error(err)
					got <- nil
					return
				}
				got <- l.Lock()
			}()
			return got
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, client := handOffEnv(t)
				c := client("c")
				ctx := context.Background()
				key := "k"
				if tc.name == "Campaign" {
					key = fencelock.ElectionLockPrefix + "k"
				}
				holder, err := c.Acquire(ctx, key, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				got := tc.wait(c)
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				releasedAt := time.Now()
				if err := holder.Release(ctx); err != nil {
					t.Fatalf("Release with a re-entrant waiter of the same Client: %v", err)
				}
				lk := <-got
				if lk == nil {
					t.FailNow()
				}
				if !time.Now().Equal(releasedAt) {
					t.Fatalf("the re-entrant waiter got the lock %v after the release, want at once", time.Since(releasedAt))
				}
				if s := b.State(tmNS, key); s.Owner != "job-7" || len(s.Holds) != 1 || s.Fence != lk.Fence() {
					t.Fatalf("store after the release: %+v, want one hold owned by job-7 with fence %d", s, lk.Fence())
				}
				if err := lk.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// Two re-entrant waiters of one Client with the same owner, lined up behind
// a plain holder: when the release gives the lock to the first, the second
// re-enters its owner's hold at once, as WithOwner promises, rather than
// waiting for the first to release.
func TestHandOffReentrantWaitersSameOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		c := client("c")
		ctx := context.Background()
		holder, err := c.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		owned := fencelock.WithOwner(ctx, "job-7")
		first := acquireAsyncCtx(t, owned, c, "k", time.Minute, fencelock.WithWait(8*time.Second))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		second := acquireAsyncCtx(t, owned, c, "k", time.Minute, fencelock.WithWait(8*time.Second))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		releasedAt := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		a, d := <-first, <-second
		if a == nil || d == nil {
			t.FailNow()
		}
		if !time.Now().Equal(releasedAt) {
			t.Fatalf("both holds %v after the release, want at once", time.Since(releasedAt))
		}
		if a.Fence() != d.Fence() || d.Holds() != 2 {
			t.Fatalf("fences %d and %d, second holds %d: want one hold re-entered (same fence, 2 holds)", a.Fence(), d.Fence(), d.Holds())
		}
		if s := b.State(tmNS, "k"); s.Owner != "job-7" || len(s.Holds) != 2 {
			t.Fatalf("store: %+v, want two holds of job-7", s)
		}
		a.Release(ctx)
		d.Release(ctx)
	})
}

// acquireAsyncCtx is acquireAsync with the caller's context.
func acquireAsyncCtx(t *testing.T, ctx context.Context, c *fencelock.Client, key string, ttl time.Duration, opts ...fencelock.AcquireOption) <-chan *fencelock.Lock {
	got := make(chan *fencelock.Lock, 1)
	go func() {
		lk, err := c.Acquire(ctx, key, ttl, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	return got
}

// A lock handed to a waiter with WithMaxHold keeps the bound: it is lost
// that long after the release that handed it over.
func TestHandOffKeepsMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := handOffEnv(t)
		c := client("c")
		ctx := context.Background()
		holder, got := holdWithWaiterOpts(t, c, time.Minute, fencelock.WithMaxHold(2*time.Second), fencelock.WithAutoRenew(10*time.Second))
		releasedAt := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		if b.HandOffs() != 1 {
			t.Fatalf("%d hand-offs, want 1", b.HandOffs())
		}
		<-lk.Done()
		if d := time.Since(releasedAt); d != 2*time.Second || !errors.Is(lk.Err(), fencelock.ErrMaxHoldExceeded) {
			t.Fatalf("handed lock ended %v after the release with %v, want 2s and ErrMaxHoldExceeded", d, lk.Err())
		}
	})
}

// holdWithWaiterOpts is holdWithWaiter with the waiter's options.
func holdWithWaiterOpts(t *testing.T, c *fencelock.Client, ttl time.Duration, opts ...fencelock.AcquireOption) (holder *fencelock.Lock, waiter <-chan *fencelock.Lock) {
	t.Helper()
	holder, err := c.Acquire(context.Background(), "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	waiter = acquireAsync(t, c, "k", ttl, opts...)
	time.Sleep(100 * time.Millisecond)
	synctest.Wait()
	return holder, waiter
}
