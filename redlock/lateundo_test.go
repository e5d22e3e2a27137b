package redlock_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
	"github.com/fencelock/fencelock/testing/faultproxy"
	"github.com/redis/go-redis/v9"
)

// An undo release that a master applies late, after the next attempt with
// the same token was granted there, takes that grant away. Such a grant must
// not count toward the majority: here the second attempt is granted by the
// late-undo master A and by B only, so without the rule the first client
// believes it holds {A, B} while the late release empties A, and a second
// client takes {A, C}: two holders.
//
// The first client reaches A through a proxy until the undo release is
// written there and held (StallRequests), then through a new, direct
// connection, so that its second attempt reaches A while the undo release
// still waits in the proxy. B and C are behind proxies whose replies are held
// until A has granted the first attempt, so that the stall on A is armed
// after the acquire and before the undo. Nothing depends on timing: each
// step waits for the state it needs.
func TestLateUndoReleaseDoesNotCount(t *testing.T) {
	servers, direct := masters(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	pa := faultproxy.New(t, servers[0].Addr())
	pb := faultproxy.New(t, servers[1].Addr())
	pc := faultproxy.New(t, servers[2].Addr())
	var aViaProxy atomic.Bool
	aViaProxy.Store(true)
	options := func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: 2 * time.Second, DialerRetries: 1, DialerRetryTimeout: time.Millisecond}
	}
	oa := options(pa.Addr())
	oa.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
		addr := servers[0].Addr()
		if aViaProxy.Load() {
			addr = pa.Addr()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	first := []redis.UniversalClient{redis.NewClient(oa), redis.NewClient(options(pb.Addr())), redis.NewClient(options(pc.Addr()))}
	for _, c := range first {
		t.Cleanup(func() { c.Close() })
		// Open each connection before any fault is armed.
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Each master gets 5s to answer the acquire, so that B's and C's held
	// replies do not time out; the undo's release to A is bounded by the
	// undo's own timeout (1s).
	b1 := newRedlock(t, first, redlock.WithNodeTimeout(5*time.Second))
	t.Cleanup(func() { b1.Close() })
	b3 := newRedlock(t, direct, redlock.WithNodeTimeout(5*time.Second))
	t.Cleanup(func() { b3.Close() })
	onA, onB, onC := redisbackend.New(direct[0]), redisbackend.New(direct[1]), redisbackend.New(direct[2])
	for _, b := range []*redisbackend.Backend{onA, onB, onC} {
		t.Cleanup(func() { b.Close() })
	}

	ref := func(token string) driver.Ref {
		return driver.Ref{Namespace: fencelock.DefaultNamespace, Key: "k", Token: token}
	}
	req := func(token string) driver.Request {
		return driver.Request{Ref: ref(token), Owner: token, TTL: time.Minute}
	}
	heldOn := func(b *redisbackend.Backend, token string) bool {
		t.Helper()
		return heldOnMaster(t, ctx, b, ref(token))
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		waitUntil(t, ctx, what, cond)
	}

	// Another client, token t2, holds B and C (not A).
	for _, b := range []*redisbackend.Backend{onB, onC} {
		if res, err := b.Acquire(ctx, req("t2")); err != nil || !res.Acquired {
			t.Fatalf("t2 on one master: %+v %v", res, err)
		}
	}

	// Attempt 1 of t1: A grants, B and C refuse (their replies held until
	// A's grant is in), so it is undone; the undo's release to A is held
	// in the proxy and times out.
	resumeB, resumeC := pb.StallReplies(), pc.StallReplies()
	type result struct {
		res driver.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := b1.Acquire(ctx, req("t1"))
		done <- result{res, err}
	}()
	waitFor("A to grant t1's first attempt", func() bool { return heldOn(onA, "t1") })
	resumeA := pa.StallRequests()
	defer resumeA()
	resumeB()
	resumeC()
	r1 := <-done
	if r1.err != nil || r1.res.Acquired {
		t.Fatalf("attempt 1: %+v %v, want refused by B and C", r1.res, r1.err)
	}
	if pa.Buffered() == 0 || !heldOn(onA, "t1") {
		t.Fatalf("the undo's release to A is not held in the proxy (%d bytes held; t1 held on A: %v)", pa.Buffered(), heldOn(onA, "t1"))
	}

	// t2 lets go of B. Attempt 2 of t1 (same token, as the Client retries)
	// reaches A on a new connection: A (still holding t1) and B grant, C
	// refuses.
	aViaProxy.Store(false)
	if res, err := onB.Release(ctx, driver.ReleaseRequest{Ref: ref("t2")}); err != nil || !res.Held {
		t.Fatalf("t2 release on B: %+v %v", res, err)
	}
	r2, err := b1.Acquire(ctx, req("t1"))
	if err != nil {
		t.Fatalf("attempt 2: %v", err)
	}

	// The undo's release of attempt 1 reaches A now, and is applied.
	resumeA()
	waitFor("the late release to reach A", func() bool { return pa.Conns() == 0 })
	if heldOn(onA, "t1") {
		t.Fatal("t1 still held on A after the late release")
	}

	// t2 lets go of C, and a third client tries: it must not get a majority
	// while t1 believes it holds one.
	if res, err := onC.Release(ctx, driver.ReleaseRequest{Ref: ref("t2")}); err != nil || !res.Held {
		t.Fatalf("t2 release on C: %+v %v", res, err)
	}
	r3, err := b3.Acquire(ctx, req("t3"))
	if err != nil {
		t.Fatalf("t3: %v", err)
	}
	if r2.Acquired && r3.Acquired {
		t.Fatalf("two holders: t1's second attempt was reported acquired (fence %d), and t3 acquired too (fence %d): A's grant of t1 was counted, and a late undo release took it away", r2.Fence, r3.Fence)
	}
	if r2.Acquired {
		return
	}
	if _, err := b3.Release(ctx, driver.ReleaseRequest{Ref: ref("t3")}); err != nil {
		t.Fatal(err)
	}

	// A renewal from A does not count for t1 either. Attempt 3 of t1 is
	// granted by all three (A's grant not counted); then C loses its data.
	// A and B still hold t1, but only B counts: not held.
	r4, err := b1.Acquire(ctx, req("t1"))
	if err != nil || !r4.Acquired {
		t.Fatalf("attempt 3 of t1 with every master free: %+v %v", r4, err)
	}
	if !heldOn(onA, "t1") || !heldOn(onB, "t1") {
		t.Fatal("attempt 3 of t1 not held on A and B")
	}
	if err := direct[2].FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	renewed, err := b1.Renew(ctx, []driver.RenewRequest{{Ref: ref("t1"), TTL: time.Minute}})
	if err != nil || len(renewed) != 1 {
		t.Fatalf("renew: %+v %v", renewed, err)
	}
	if renewed[0].Held {
		t.Fatalf("renew of t1 held by A (late undo) and B only: reported held, want not held (A's hold must not count)")
	}
	if ttl, err := b1.TTL(ctx, ref("t1")); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("TTL of t1 held by A (late undo) and B only: %v %v, want ErrNotHeld", ttl, err)
	}

	// Releasing t1 forgets A's mark: were t1 acquired again, A would count.
	if _, err := b1.Release(ctx, driver.ReleaseRequest{Ref: ref("t1")}); err != nil {
		t.Fatal(err)
	}
	if r, err := b1.Acquire(ctx, req("t1")); err != nil || !r.Acquired {
		t.Fatalf("t1 again after its release: %+v %v", r, err)
	}
	if err := direct[2].FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	renewed, err = b1.Renew(ctx, []driver.RenewRequest{{Ref: ref("t1"), TTL: time.Minute}})
	if err != nil || len(renewed) != 1 || !renewed[0].Held {
		t.Fatalf("renew of t1 held by A and B after its release forgot A's mark: %+v %v, want held", renewed, err)
	}
}

// heldOnMaster reports whether the lock ref is held on one master.
func heldOnMaster(t *testing.T, ctx context.Context, b *redisbackend.Backend, ref driver.Ref) bool {
	t.Helper()
	_, err := b.TTL(ctx, ref)
	if err != nil && !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatal(err)
	}
	return err == nil
}

// waitUntil polls cond until it holds, failing the test when ctx ends
// first.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}
