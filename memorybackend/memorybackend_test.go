package memorybackend_test

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

func ref(key, token string) driver.Ref {
	return driver.Ref{Namespace: "ns", Key: key, Token: token}
}

func acquireReq(token, owner string, ttl time.Duration) driver.Request {
	if owner == "" {
		owner = token
	}
	return driver.Request{Ref: ref("k", token), Owner: owner, TTL: ttl}
}

// mustAcquire makes one acquire attempt that must not fail.
func mustAcquire(t *testing.T, b *memorybackend.Backend, token, owner string, ttl time.Duration) driver.Result {
	t.Helper()
	res, err := b.Acquire(t.Context(), acquireReq(token, owner, ttl))
	if err != nil {
		t.Fatalf("Acquire(%s): %v", token, err)
	}
	return res
}

// newBackend makes a Backend closed at the end of the test (inside the
// bubble under synctest).
func newBackend(t *testing.T) *memorybackend.Backend {
	b := memorybackend.New()
	t.Cleanup(func() { b.Close() })
	return b
}

// outcome is the result of a call made in another goroutine.
type outcome struct {
	res driver.Result
	err error
}

// goAcquire makes an acquire attempt in a new goroutine.
func goAcquire(ctx context.Context, b *memorybackend.Backend, req driver.Request) <-chan outcome {
	c := make(chan outcome, 1)
	go func() {
		res, err := b.Acquire(ctx, req)
		c <- outcome{res, err}
	}()
	return c
}

func wantCalls(t *testing.T, b *memorybackend.Backend, ops memorybackend.Op, attempted, applied int) {
	t.Helper()
	if got := b.Calls(ops); got != (memorybackend.Calls{Attempted: attempted, Applied: applied}) {
		t.Fatalf("Calls(%v) = %+v, want %d attempted, %d applied", ops, got, attempted, applied)
	}
}

// A request delayed in flight is applied when it arrives, after its caller
// gave up; meanwhile the lock was free for others.
func TestRequestDelayAppliesAfterCallerGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, RequestDelay: 2 * time.Second, Times: 1})

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := b.Acquire(ctx, acquireReq("a", "", 10*time.Second))
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("delayed acquire: %v after %v, want DeadlineExceeded after 1s", err, time.Since(start))
		}
		if st := b.State("ns", "k"); st.Held() {
			t.Fatalf("state while the request is in flight: %+v, want free", st)
		}
		wantCalls(t, b, memorybackend.Acquire, 1, 0)

		time.Sleep(time.Second)
		synctest.Wait()
		st := b.State("ns", "k")
		want := []memorybackend.Hold{{Token: "a", TTL: 10 * time.Second}}
		if st.Owner != "a" || st.Fence != 1 || len(st.Holds) != 1 || st.Holds[0] != want[0] {
			t.Fatalf("state after the request landed: %+v, want a holding fence 1 with a 10s lease from its arrival", st)
		}
		wantCalls(t, b, memorybackend.Acquire, 1, 1)

		// The fault hit one call only.
		if res := mustAcquire(t, b, "b", "", time.Second); res.Acquired || res.HolderTTL != 10*time.Second {
			t.Fatalf("acquire by another owner: %+v, want refused with the holder's 10s", res)
		}
	})
}

// A late acquire finds the lock taken by whoever came first, or refused by
// the tombstone its caller left when it gave up.
func TestTombstoneRefusesLateAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, RequestDelay: 2 * time.Second, Times: 1})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := b.Acquire(ctx, acquireReq("late", "", 10*time.Second)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("delayed acquire: %v, want DeadlineExceeded", err)
		}
		// The caller gives up and asks for a tombstone: nothing to release.
		rel, err := b.Release(t.Context(), driver.ReleaseRequest{Ref: ref("k", "late"), Tombstone: 5 * time.Second})
		if err != nil || rel.Held {
			t.Fatalf("release of the in-flight token: %+v %v, want not held", rel, err)
		}

		time.Sleep(time.Second)
		synctest.Wait() // the late acquire has landed
		wantCalls(t, b, memorybackend.Acquire, 1, 1)
		st := b.State("ns", "k")
		if st.Held() || st.LastFence != 0 {
			t.Fatalf("state after the late acquire: %+v, want free, no fence minted", st)
		}
		if len(st.Tombstones) != 1 || st.Tombstones[0] != (memorybackend.Tombstone{Token: "late", TTL: 4 * time.Second}) {
			t.Fatalf("tombstones: %+v, want late's with 4s left", st.Tombstones)
		}
		if res := mustAcquire(t, b, "other", "", time.Second); !res.Acquired || res.Fence != 1 {
			t.Fatalf("acquire by another token: %+v, want acquired with fence 1", res)
		}
		b.Release(t.Context(), driver.ReleaseRequest{Ref: ref("k", "other")})

		// Until the tombstone ends, the token is refused; then it is not.
		time.Sleep(4*time.Second - time.Nanosecond)
		if res := mustAcquire(t, b, "late", "", time.Second); res.Acquired || res.HolderTTL != 0 {
			t.Fatalf("acquire with the token just before its tombstone ends: %+v, want refused, HolderTTL 0 (free)", res)
		}
		time.Sleep(time.Nanosecond)
		if st := b.State("ns", "k"); len(st.Tombstones) != 0 {
			t.Fatalf("tombstones after their end: %+v", st.Tombstones)
		}
		if res := mustAcquire(t, b, "late", "", time.Second); !res.Acquired || res.Fence != 2 {
			t.Fatalf("acquire with the token after its tombstone: %+v, want acquired with fence 2", res)
		}
	})
}

// A request whose caller is still waiting in flight when another lands
// first loses the race; the caller gets the real outcome.
func TestRequestDelayOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, RequestDelay: time.Second, Times: 1})
		slow := goAcquire(t.Context(), b, acquireReq("slow", "", 10*time.Second))
		synctest.Wait()
		if fast := mustAcquire(t, b, "fast", "", 10*time.Second); !fast.Acquired {
			t.Fatalf("undelayed acquire: %+v", fast)
		}
		if o := <-slow; o.err != nil || o.res.Acquired || o.res.HolderTTL != 9*time.Second {
			t.Fatalf("delayed acquire: %+v %v, want refused with 9s left of the holder's lease", o.res, o.err)
		}
	})
}

// A delayed reply: the request is applied at once; a caller that gives up
// gets ctx.Err().
func TestReplyDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		clear := b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire | memorybackend.Release, ReplyDelay: 3 * time.Second})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := b.Acquire(ctx, acquireReq("a", "", 10*time.Second)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire with a slow reply: %v, want DeadlineExceeded", err)
		}
		if st := b.State("ns", "k"); st.Owner != "a" || st.Holds[0].TTL != 9*time.Second {
			t.Fatalf("state: %+v, want a holding since 1s ago", st)
		}
		start := time.Now()
		rel, err := b.Release(t.Context(), driver.ReleaseRequest{Ref: ref("k", "a")})
		if err != nil || !rel.Held || time.Since(start) != 3*time.Second {
			t.Fatalf("release with a slow reply: %+v %v after %v, want held after 3s", rel, err, time.Since(start))
		}
		clear()
		clear() // idempotent
		start = time.Now()
		mustAcquire(t, b, "b", "", time.Second)
		if time.Since(start) != 0 {
			t.Fatalf("acquire after clear took %v", time.Since(start))
		}
		wantCalls(t, b, memorybackend.AllOps, 3, 3)
	})
}

// Refuse: nothing applied, ever; with a delay, the call fails after it.
func TestRefuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		b.Inject(memorybackend.Fault{Ops: memorybackend.AllOps, Refuse: true, Times: 2})
		if _, err := b.Acquire(t.Context(), acquireReq("a", "", time.Second)); !errors.Is(err, memorybackend.ErrRefused) {
			t.Fatalf("refused acquire: %v", err)
		}
		if _, err := b.TTL(t.Context(), ref("k", "a")); !errors.Is(err, memorybackend.ErrRefused) {
			t.Fatalf("refused TTL: %v", err)
		}
		wantCalls(t, b, memorybackend.AllOps, 2, 0)
		if res := mustAcquire(t, b, "a", "", time.Second); !res.Acquired {
			t.Fatalf("acquire after the fault's Times: %+v", res)
		}

		// A partition: the call hangs for the delay, then fails; the
		// request never lands.
		b.Inject(memorybackend.Fault{Ops: memorybackend.Renew, Refuse: true, RequestDelay: 5 * time.Second, Times: 1})
		start := time.Now()
		_, err := b.Renew(t.Context(), []driver.RenewRequest{{Ref: ref("k", "a"), TTL: time.Minute}})
		if !errors.Is(err, memorybackend.ErrRefused) || time.Since(start) != 5*time.Second {
			t.Fatalf("renewal into a partition: %v after %v, want ErrRefused after 5s", err, time.Since(start))
		}
		wantCalls(t, b, memorybackend.Renew, 1, 0)
		if st := b.State("ns", "k"); st.Held() {
			t.Fatalf("the 1s lease was renewed by a refused request: %+v", st)
		}
	})
}

// LoseReply: applied, but the caller gets an error; a released lock wakes
// its watchers.
func TestLoseReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire | memorybackend.Release, LoseReply: true, Times: 2})
		if _, err := b.Acquire(t.Context(), acquireReq("a", "", time.Minute)); !errors.Is(err, memorybackend.ErrReplyLost) {
			t.Fatalf("acquire with a lost reply: %v", err)
		}
		if st := b.State("ns", "k"); st.Owner != "a" {
			t.Fatalf("state after a lost acquire reply: %+v, want held by a", st)
		}
		w, err := b.Watch(t.Context(), driver.WatchRequest{Ref: driver.Ref{Namespace: "ns", Key: "k"}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := b.Release(t.Context(), driver.ReleaseRequest{Ref: ref("k", "a")}); !errors.Is(err, memorybackend.ErrReplyLost) {
			t.Fatalf("release with a lost reply: %v", err)
		}
		select {
		case <-w.C:
		default:
			t.Fatal("no notification of a release whose reply was lost")
		}
		if st := b.State("ns", "k"); st.Held() {
			t.Fatalf("state after a lost release reply: %+v, want free", st)
		}
		wantCalls(t, b, memorybackend.AllOps, 2, 2)
	})
}

// Pause: calls wait unapplied; on resume, every queued request is applied
// in arrival order, also those whose callers gave up.
func TestPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		resume := b.Pause()

		// First to arrive: a caller that gives up after 1s.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		gaveUp := goAcquire(ctx, b, acquireReq("first", "", 10*time.Second))
		synctest.Wait()
		// Second: a patient caller.
		waited := goAcquire(t.Context(), b, acquireReq("second", "", 10*time.Second))
		synctest.Wait()

		if o := <-gaveUp; !errors.Is(o.err, context.DeadlineExceeded) {
			t.Fatalf("paused acquire whose ctx ended: %v", o.err)
		}
		time.Sleep(4 * time.Second)
		wantCalls(t, b, memorybackend.Acquire, 2, 0)
		if st := b.State("ns", "k"); st.Held() {
			t.Fatalf("state while paused: %+v, want free", st)
		}
		select {
		case o := <-waited:
			t.Fatalf("a paused call returned %+v %v", o.res, o.err)
		default:
		}

		resume()
		if o := <-waited; o.err != nil || o.res.Acquired || o.res.HolderTTL != 10*time.Second {
			t.Fatalf("second acquire after resume: %+v %v, want refused: the first (abandoned) one arrived first", o.res, o.err)
		}
		st := b.State("ns", "k")
		if st.Owner != "first" || st.Holds[0].TTL != 10*time.Second {
			t.Fatalf("state after resume: %+v, want first holding a lease from the resume", st)
		}
		wantCalls(t, b, memorybackend.Acquire, 2, 2)
		resume() // idempotent
	})
}

// Pauses nest, and a delayed request that arrives while paused waits too.
func TestPauseNestsAndDelayedArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		r1, r2 := b.Pause(), b.Pause()
		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, RequestDelay: time.Second, Times: 1})
		done := goAcquire(t.Context(), b, acquireReq("a", "", 10*time.Second))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		r1()
		r1()
		synctest.Wait()
		wantCalls(t, b, memorybackend.Acquire, 1, 0)
		r2()
		if o := <-done; o.err != nil || !o.res.Acquired {
			t.Fatalf("acquire after both resumes: %+v %v", o.res, o.err)
		}
	})
}

// Close: calls waiting return ErrClosed at once, Close waits for requests
// in flight (which land), later calls fail.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, RequestDelay: 10 * time.Second, Times: 1})
		inFlight := goAcquire(t.Context(), b, acquireReq("a", "", time.Minute))
		synctest.Wait()
		resume := b.Pause()
		paused := make(chan error)
		go func() {
			_, err := b.TTL(t.Context(), ref("k", "a"))
			paused <- err
		}()
		time.Sleep(time.Second)

		start := time.Now()
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		if o := <-inFlight; !errors.Is(o.err, memorybackend.ErrClosed) {
			t.Fatalf("in-flight call at Close: %v, want ErrClosed", o.err)
		}
		if err := <-paused; !errors.Is(err, memorybackend.ErrClosed) {
			t.Fatalf("paused call at Close: %v, want ErrClosed", err)
		}
		<-closed
		if time.Since(start) != 9*time.Second {
			t.Fatalf("Close returned after %v, want 9s (the in-flight request's arrival)", time.Since(start))
		}
		// The in-flight acquire arrived while paused: queued, not applied.
		wantCalls(t, b, memorybackend.AllOps, 2, 0)
		resume()
		if st := b.State("ns", "k"); st.Owner != "a" {
			t.Fatalf("state after resume: %+v, want held by a", st)
		}
		if _, err := b.Acquire(t.Context(), acquireReq("b", "", time.Minute)); !errors.Is(err, memorybackend.ErrClosed) {
			t.Fatalf("acquire after Close: %v", err)
		}
		if _, err := b.Watch(t.Context(), driver.WatchRequest{Ref: driver.Ref{Namespace: "ns", Key: "k"}}); !errors.Is(err, memorybackend.ErrClosed) {
			t.Fatalf("watch after Close: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// The newest matching fault applies, and only it uses up a call.
func TestFaultPrecedence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		b.Inject(memorybackend.Fault{Ops: memorybackend.AllOps, ReplyDelay: time.Second})
		b.Inject(memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true, Times: 1})
		if _, err := b.Acquire(t.Context(), acquireReq("a", "", time.Minute)); !errors.Is(err, memorybackend.ErrRefused) {
			t.Fatalf("first acquire: %v, want the newest fault (refused)", err)
		}
		start := time.Now()
		mustAcquire(t, b, "a", "", time.Minute)
		if _, err := b.TTL(t.Context(), ref("k", "a")); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) != 2*time.Second {
			t.Fatalf("two calls under the 1s reply delay took %v", time.Since(start))
		}
	})
}

// Every hold has its own lease; the lock is free when none is running.
func TestPerHoldLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		mustAcquire(t, b, "outer", "o", 10*time.Second)
		if res := mustAcquire(t, b, "inner", "o", time.Second); !res.Acquired || res.Holds != 2 || res.Fence != 1 {
			t.Fatalf("re-entry: %+v", res)
		}
		if res := mustAcquire(t, b, "x", "", time.Second); res.HolderTTL != 10*time.Second {
			t.Fatalf("HolderTTL %v, want the latest lease (10s)", res.HolderTTL)
		}
		time.Sleep(time.Second)
		st := b.State("ns", "k")
		if len(st.Holds) != 1 || st.Holds[0] != (memorybackend.Hold{Token: "outer", TTL: 9 * time.Second}) {
			t.Fatalf("holds after the inner lease ended: %+v", st.Holds)
		}
		res, err := b.Renew(t.Context(), []driver.RenewRequest{
			{Ref: ref("k", "inner"), TTL: time.Minute},
			{Ref: ref("k", "outer"), TTL: 2 * time.Second},
			{Ref: ref("other", "outer"), TTL: time.Minute},
		})
		if err != nil || len(res) != 3 || res[0].Held || !res[1].Held || res[2].Held {
			t.Fatalf("renew batch: %+v %v, want [not held, held, not held]", res, err)
		}
		wantCalls(t, b, memorybackend.Renew, 1, 1)
		if ttl, err := b.TTL(t.Context(), ref("k", "outer")); ttl != 2*time.Second || err != nil {
			t.Fatalf("TTL after renewing to 2s: %v %v (a renewal sets the lease, even shorter)", ttl, err)
		}
		w, err := b.Watch(t.Context(), driver.WatchRequest{Ref: driver.Ref{Namespace: "ns", Key: "k"}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		time.Sleep(2 * time.Second)
		if st := b.State("ns", "k"); st.Held() || st.LastFence != 1 {
			t.Fatalf("state after every lease ended: %+v", st)
		}
		select {
		case <-w.C:
			t.Fatal("notified of an expiry (only releases notify)")
		default:
		}
		if res := mustAcquire(t, b, "next", "", time.Second); !res.Acquired || res.Fence != 2 {
			t.Fatalf("acquire after expiry: %+v, want fence 2", res)
		}
	})
}

// Delete loses the lock: holds gone, counter kept, no notification.
func TestDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(t)
		mustAcquire(t, b, "a", "", time.Minute)
		w, err := b.Watch(t.Context(), driver.WatchRequest{Ref: driver.Ref{Namespace: "ns", Key: "k"}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if !b.Delete("ns", "k") || b.Delete("ns", "k") || b.Delete("ns", "nothing") {
			t.Fatal("Delete reported the wrong lock state")
		}
		select {
		case <-w.C:
			t.Fatal("notified of a Delete")
		default:
		}
		if r, _ := b.Renew(t.Context(), []driver.RenewRequest{{Ref: ref("k", "a"), TTL: time.Minute}}); r[0].Held {
			t.Fatal("renewed a deleted lock")
		}
		if res := mustAcquire(t, b, "b", "", time.Second); res.Fence != 2 {
			t.Fatalf("acquire after Delete: %+v, want fence 2", res)
		}
	})
}

// Watches coalesce and stop.
func TestWatch(t *testing.T) {
	b := memorybackend.New()
	defer b.Close()
	w, err := b.Watch(t.Context(), driver.WatchRequest{Ref: driver.Ref{Namespace: "ns", Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		mustAcquire(t, b, "a", "", time.Minute)
		b.Release(t.Context(), driver.ReleaseRequest{Ref: ref("k", "a")})
	}
	<-w.C
	select {
	case <-w.C:
		t.Fatal("notifications were not coalesced")
	default:
	}
	w.Stop()
	w.Stop()
	mustAcquire(t, b, "a", "", time.Minute)
	b.Release(t.Context(), driver.ReleaseRequest{Ref: ref("k", "a")})
	select {
	case <-w.C:
		t.Fatal("a stopped watch was notified")
	default:
	}
}

// Arguments a store would refuse fail before any request is sent.
func TestInvalidArguments(t *testing.T) {
	b := memorybackend.New()
	defer b.Close()
	ctx := t.Context()
	check := func(what string, err error, name string, value any) {
		t.Helper()
		var ia *fencelock.InvalidArgumentError
		if !errors.As(err, &ia) || !errors.Is(err, fencelock.ErrInvalidArgument) || ia.Name != name || ia.Value != value {
			t.Errorf("%s: %v, want an InvalidArgumentError for %s %v", what, err, name, value)
		}
	}
	_, err := b.Acquire(ctx, driver.Request{Ref: driver.Ref{Token: "t"}, Owner: "t", TTL: time.Second})
	check("acquire with an empty key", err, "key", "")
	_, err = b.Acquire(ctx, acquireReq("t", "", 0))
	check("acquire with ttl 0", err, "ttl", time.Duration(0))
	_, err = b.Acquire(ctx, acquireReq("t", "", -time.Second))
	check("acquire with a negative ttl", err, "ttl", -time.Second)
	_, err = b.Acquire(ctx, driver.Request{Ref: ref("k", ""), Owner: "o", TTL: time.Second})
	check("acquire with an empty token", err, "token", "")
	_, err = b.Release(ctx, driver.ReleaseRequest{Ref: ref("", "t")})
	check("release with an empty key", err, "key", "")
	_, err = b.Renew(ctx, []driver.RenewRequest{{Ref: ref("k", "t"), TTL: time.Second}, {Ref: ref("k", "t")}})
	check("renew with ttl 0", err, "ttl", time.Duration(0))
	_, err = b.TTL(ctx, ref("", "t"))
	check("TTL with an empty key", err, "key", "")
	_, err = b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "ns", Key: ""}})
	check("watch with an empty key", err, "key", "")
	wantCalls(t, b, memorybackend.AllOps, 0, 0)

	if _, err := b.TTL(ctx, ref("k", "t")); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Errorf("TTL of nothing: %v, want ErrNotHeld", err)
	}
}

// A Fault that can only be a mistake fails every call, until cleared, with
// an InvalidArgumentError naming the bad field and value: the test that
// injected it sees why, and nothing panics.
func TestInjectMistakeFailsCalls(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		f     memorybackend.Fault
		field string
	}{
		{memorybackend.Fault{}, "Ops"},
		{memorybackend.Fault{Ops: 1 << 6}, "Ops"},
		{memorybackend.Fault{Ops: memorybackend.Acquire, Times: -1}, "Times"},
		{memorybackend.Fault{Ops: memorybackend.Acquire, RequestDelay: -1}, "RequestDelay"},
		{memorybackend.Fault{Ops: memorybackend.Acquire, ReplyDelay: -1}, "ReplyDelay"},
		{memorybackend.Fault{Ops: memorybackend.Acquire, Refuse: true, LoseReply: true}, "Refuse and LoseReply"},
	} {
		b := memorybackend.New()
		clear := b.Inject(tc.f)
		_, err := b.Renew(ctx, []driver.RenewRequest{{Ref: ref("k", "t"), TTL: time.Second}})
		var ia *fencelock.InvalidArgumentError
		if !errors.As(err, &ia) || ia.Name != "memorybackend.Fault."+tc.field || strings.Contains(err.Error(), "\n") {
			t.Errorf("Renew after Inject(%+v): %v, want an InvalidArgumentError naming Fault.%s", tc.f, err, tc.field)
		}
		clear()
		if _, err := b.Renew(ctx, []driver.RenewRequest{{Ref: ref("k", "t"), TTL: time.Second}}); err != nil {
			t.Errorf("Renew after clearing the mistaken fault: %v", err)
		}
		b.Close()
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[memorybackend.Op]string{
		0: "none",
		memorybackend.Acquire | memorybackend.TTL: "acquire|ttl",
		memorybackend.AllOps:                      "acquire|release|renew|ttl",
	} {
		if got := op.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(op), got, want)
		}
	}
}

// The synctest example (example_synctest_test.go) runs as a test.
func TestExampleSynctest(t *testing.T) { holderLearnsOfLoss(t) }
