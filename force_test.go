package fencelock_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
	"github.com/redis/go-redis/v9"
)

// ForceRelease against a holder whose waiter, in another Client, takes the
// lock the moment it is freed: only the holder seen at the start goes.

// lateInspector is the memory backend whose inspections after the first
// come a millisecond late: in a synctest bubble, the waiter that the
// release woke takes the lock before ForceRelease looks again. afterFirst,
// if set, runs once the first inspection has read the lock.
type lateInspector struct {
	*memorybackend.Backend
	afterFirst func()
	calls      atomic.Int32
}

func (l *lateInspector) InspectLock(ctx context.Context, namespace, key string) (fencelock.LockInfo, error) {
	if l.calls.Add(1) > 1 {
		time.Sleep(time.Millisecond)
		return l.Backend.InspectLock(ctx, namespace, key)
	}
	info, err := l.Backend.InspectLock(ctx, namespace, key)
	if l.afterFirst != nil {
		l.afterFirst()
	}
	return info, err
}

// The holder's holds go (its re-entries too: the same fence); the waiter of
// another Client that took the lock 1ms later keeps it, its *Lock intact,
// and the log says what was released and that the next holder was left.
func TestForceReleaseLeavesNextHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		var logs syncBuffer
		holder, next := fencelock.New(b), fencelock.New(b)
		admin := fencelock.New(&lateInspector{Backend: b}, fencelock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		for _, c := range []*fencelock.Client{holder, next, admin} {
			t.Cleanup(func() { c.Close() })
		}
		ctx := context.Background()
		octx := fencelock.WithOwner(ctx, "job-7")
		outer, err := holder.TryAcquire(octx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := holder.TryAcquire(octx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		waiting := hmGo(func() (*fencelock.Lock, error) { return next.Acquire(ctx, "k", time.Minute) })
		hmPending(waiting)

		before, err := admin.ForceRelease(ctx, "k", "stuck")
		if err != nil {
			t.Fatalf("ForceRelease: %v", err)
		}
		if !before.Held || before.Fence != outer.Fence() || len(before.Holds) != 2 {
			t.Fatalf("state before: %+v, want job-7's two holds with fence %d", before, outer.Fence())
		}
		w := <-waiting
		if w.err != nil {
			t.Fatalf("waiter: %v", w.err)
		}
		if w.took != 0 || w.lk.Fence() <= outer.Fence() {
			t.Fatalf("waiter: fence %d after %v, want a larger fence than %d at once", w.lk.Fence(), w.took, outer.Fence())
		}
		synctest.Wait()
		st := b.State(fencelock.DefaultNamespace, "k")
		if len(st.Holds) != 1 || st.Holds[0].Token != w.lk.Token() || st.Fence != w.lk.Fence() {
			t.Fatalf("after ForceRelease: %+v, want the next holder's hold (fence %d) alone", st, w.lk.Fence())
		}
		if err := w.lk.Err(); err != nil {
			t.Fatalf("the next holder's *Lock: %v, want held", err)
		}
		if err := w.lk.Refresh(ctx, time.Minute); err != nil {
			t.Fatalf("the next holder's Refresh: %v", err)
		}
		for _, lk := range []*fencelock.Lock{outer, inner} {
			if err := lk.Refresh(ctx, time.Minute); !errors.Is(err, fencelock.ErrLost) && !errors.Is(err, fencelock.ErrNotHeld) {
				t.Errorf("the forced-out hold's Refresh: %v, want it lost", err)
			}
		}
		out := logs.String()
		for _, want := range []string{`msg="fencelock: force release" key=k reason=stuck owner=job-7`,
			`msg="fencelock: force released" key=k reason=stuck fence=` + strconv.FormatInt(outer.Fence(), 10) + ` released=2`,
			"next_fence=" + strconv.FormatInt(w.lk.Fence(), 10)} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
	})
}

// Re-entries the holder takes while ForceRelease runs have its fence: they
// go too.
func TestForceReleaseTakesReentriesMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		holder := fencelock.New(b)
		ctx := context.Background()
		octx := fencelock.WithOwner(ctx, "job-7")
		var inner *fencelock.Lock
		li := &lateInspector{Backend: b, afterFirst: func() {
			// A re-entry after ForceRelease looked, before it releases.
			var err error
			if inner, err = holder.TryAcquire(octx, "k", time.Minute); err != nil {
				t.Errorf("re-entry: %v", err)
			}
		}}
		admin := fencelock.New(li)
		t.Cleanup(func() { holder.Close(); admin.Close() })
		outer, err := holder.TryAcquire(octx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		before, err := admin.ForceRelease(ctx, "k", "stuck")
		if err != nil {
			t.Fatalf("ForceRelease: %v", err)
		}
		if len(before.Holds) != 1 || inner == nil || inner.Fence() != outer.Fence() {
			t.Fatalf("state before: %+v; the re-entry %v, want one hold seen and a re-entry with fence %d", before, inner, outer.Fence())
		}
		synctest.Wait()
		if st := b.State(fencelock.DefaultNamespace, "k"); st.Held() {
			t.Fatalf("after ForceRelease: %+v, want free (the re-entry has the holder's fence %d)", st, outer.Fence())
		}
	})
}

// Against a real redis-server: the waiter is in another Client (as another
// process), woken by the release's message; ForceRelease's second look is
// held back until the waiter has the lock, as the scheduler sometimes
// orders it on its own.
func TestForceReleaseLeavesNextHolderRedis(t *testing.T) {
	t.Parallel()
	srv, rdb := startRedis(t)
	holder, next := newClient(t, rdb), newClient(t, rdb)
	took := make(chan struct{})
	adminRdb := newRedisClient(t, srv.Addr())
	adminRdb.AddHook(&laterLooks{after: took})
	admin := newClient(t, adminRdb)
	ctx := ctxTimeout(t, 30*time.Second)

	first, err := holder.TryAcquire(ctx, "k", time.Minute, fencelock.WithAutoRenew(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *fencelock.Lock
		err error
	}
	waited := make(chan result, 1)
	waiting := make(chan struct{})
	go func() {
		lk, err := next.Acquire(ctx, "k", time.Minute, fencelock.WithAutoRenew(200*time.Millisecond))
		close(took)
		waited <- result{lk, err}
	}()
	// The waiter has been refused once: the lock is marked as waited for,
	// so its release publishes.
	go func() {
		for {
			if n, _ := rdb.HExists(ctx, "lock:{k}:lock", "waited").Result(); n {
				close(waiting)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter made no attempt")
	}
	if _, err := admin.ForceRelease(ctx, "k", "stuck"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	var w result
	select {
	case w = <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock after the force release")
	}
	if w.err != nil {
		t.Fatalf("waiter: %v", w.err)
	}
	info, err := admin.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != w.lk.Fence() || len(info.Holds) != 1 || info.Holds[0].Token != w.lk.Token() {
		t.Fatalf("after ForceRelease: %+v, want the next holder (fence %d, above %d) alone", info, w.lk.Fence(), first.Fence())
	}
	// Its renewals (every 200ms) find it held.
	select {
	case <-w.lk.Done():
		t.Fatalf("the next holder lost the lock: %v", w.lk.Err())
	case <-time.After(time.Second):
	}
	if err := w.lk.Release(ctx); err != nil {
		t.Fatalf("the next holder's Release: %v", err)
	}
}

// laterLooks holds every inspection after the first (a pipeline that
// begins with TIME) until after is closed, or 10s.
type laterLooks struct {
	after <-chan struct{}
	looks atomic.Int32
}

func (h *laterLooks) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *laterLooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *laterLooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "time" && h.looks.Add(1) > 1 {
			select {
			case <-h.after:
			case <-time.After(10 * time.Second):
			}
		}
		return next(ctx, cmds)
	}
}

// ForceRelease of a name frees the holds of every kind seen at the start:
// the permits of its semaphore and the holds of its read-write lock too,
// and never a permit taken meanwhile, by a waiter woken by the first
// release. Given kinds, it frees those kinds only.
func TestForceReleaseEveryKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		var logs syncBuffer
		holder, next := fencelock.New(b), fencelock.New(b)
		admin := fencelock.New(b, fencelock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		for _, c := range []*fencelock.Client{holder, next, admin} {
			t.Cleanup(func() { c.Close() })
		}
		ctx := context.Background()
		// The holders are of other Clients: they learn of a force release
		// at their next renewal.
		renew := fencelock.WithAutoRenew(time.Second)
		var permits []*fencelock.Lock
		for range 2 {
			lk, err := holder.Semaphore("partner-api", 2).TryAcquire(ctx, time.Minute, renew)
			if err != nil {
				t.Fatal(err)
			}
			permits = append(permits, lk)
		}
		reader, err := holder.RWLock("partner-api").TryAcquireRead(ctx, time.Minute, renew)
		if err != nil {
			t.Fatal(err)
		}
		lock, err := holder.TryAcquire(ctx, "partner-api", time.Minute, renew)
		if err != nil {
			t.Fatal(err)
		}
		waiting := hmGo(func() (*fencelock.Lock, error) {
			return next.Semaphore("partner-api", 2).Acquire(ctx, time.Minute, renew)
		})
		hmPending(waiting)

		// The permits only.
		before, err := admin.ForceRelease(ctx, "partner-api", "quota stuck", fencelock.KindSemaphore)
		if err != nil {
			t.Fatal(err)
		}
		if !before.Held || len(before.Others) != 3 {
			t.Fatalf("state before: %+v, want the lock, 2 permits and a reader", before)
		}
		w := <-waiting
		if w.err != nil {
			t.Fatalf("waiter: %v", w.err)
		}
		time.Sleep(2 * time.Second)
		for _, lk := range permits {
			if lk.Err() == nil {
				t.Errorf("permit %d not ended by the force release", lk.Fence())
			}
		}
		if err := w.lk.Err(); err != nil {
			t.Fatalf("the permit taken meanwhile: %v, want held", err)
		}
		st := b.SemaphoreState(fencelock.DefaultNamespace, "partner-api")
		if _, ok := st.Holds[w.lk.Token()]; !ok || len(st.Holds) != 1 {
			t.Fatalf("permits after: %v, want the waiter's alone", st.Holds)
		}
		if lock.Err() != nil || reader.Err() != nil {
			t.Fatalf("a force release of the permits touched the lock (%v) or the reader (%v)", lock.Err(), reader.Err())
		}

		// Every kind: the lock, the reader and the permit seen now.
		before, err = admin.ForceRelease(ctx, "partner-api", "all of it")
		if err != nil {
			t.Fatal(err)
		}
		if !before.Held || len(before.Others) != 2 {
			t.Fatalf("state before: %+v, want the lock, a permit and a reader", before)
		}
		time.Sleep(2 * time.Second)
		info, err := admin.Inspect(ctx, "partner-api")
		if err != nil || info.AnyHeld() {
			t.Fatalf("after: %+v, %v; want nothing held", info, err)
		}
		for _, lk := range []*fencelock.Lock{lock, reader, w.lk} {
			if !errors.Is(lk.Err(), fencelock.ErrLost) {
				t.Errorf("%v %d: %v, want lost", lk.Key(), lk.Fence(), lk.Err())
			}
		}
		out := logs.String()
		for _, want := range []string{`others="[semaphore/1/`, "released=2", "released=3", `read/`} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
		if _, err := admin.ForceRelease(ctx, "partner-api", "x", fencelock.Kind(9)); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("an unknown kind: %v, want ErrInvalidArgument", err)
		}
	})
}

// Against a real redis-server: another Client's Inspect of the name shows
// the permits held (the plain lock is free), and ForceRelease frees them.
func TestInspectAndForceReleasePermitsRedis(t *testing.T) {
	_, rdb := startRedis(t)
	holder, admin := newClient(t, rdb), newClient(t, rdb)
	ctx := ctxTimeout(t, 20*time.Second)
	var permits []*fencelock.Lock
	for range 3 {
		lk, err := holder.Semaphore("partner-api", 3).TryAcquire(ctx, time.Minute, fencelock.WithAutoRenew(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, lk)
	}
	info, err := admin.Inspect(ctx, "partner-api")
	if err != nil {
		t.Fatal(err)
	}
	if info.Held || !info.AnyHeld() || len(info.Others) != 3 {
		t.Fatalf("3 permits held: %+v, want the plain lock free and the 3 permits in Others", info)
	}
	for i, h := range info.Others {
		if h.Kind != fencelock.KindSemaphore || h.Token != permits[i].Token() || h.Fence != permits[i].Fence() || h.TTL <= 0 {
			t.Errorf("Others[%d] = %+v, want permit %s with fence %d", i, h, permits[i].Token(), permits[i].Fence())
		}
	}
	if _, err := admin.ForceRelease(ctx, "partner-api", "quota stuck"); err != nil {
		t.Fatal(err)
	}
	if info, err := admin.Inspect(ctx, "partner-api"); err != nil || info.AnyHeld() {
		t.Fatalf("after ForceRelease: %+v, %v; want nothing held", info, err)
	}
	for _, lk := range permits {
		waitDone(t, lk.Done(), 5*time.Second, "the forced-out permit's loss at its next renewal")
	}
}
