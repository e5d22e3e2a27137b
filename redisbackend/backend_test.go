package redisbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

func newBackend(t *testing.T, opts ...redisbackend.Option) (*redisbackend.Backend, *redis.Client) {
	t.Helper()
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b := redisbackend.New(rdb, opts...)
	t.Cleanup(func() { b.Close() })
	return b, rdb
}

func acquireReq(key, token, owner string, ttl time.Duration) driver.Request {
	return driver.Request{
		Ref:   driver.Ref{Namespace: "t", Key: key, Token: token},
		Owner: owner,
		TTL:   ttl,
	}
}

// A retried acquire with the same token (its first reply was lost) succeeds
// without a second hold or a new fence, and its lease starts again.
func TestAcquireRetryIsIdempotent(t *testing.T) {
	b, rdb := newBackend(t)
	ctx := context.Background()
	const ttl = 10 * time.Second
	req := acquireReq("k", "tok1", "tok1", ttl)
	first, err := b.Acquire(ctx, req)
	if err != nil || !first.Acquired {
		t.Fatalf("first: %+v %v", first, err)
	}
	// Time passed before the retry: the hold's lease (its t:TOKEN field,
	// server ms) and the key's expiry, which follows it, end in 100ms.
	serverNow := rdb.Time(ctx).Val().UnixMilli()
	rdb.HSet(ctx, "t:{k}:lock", "t:tok1", serverNow+100)
	rdb.PExpire(ctx, "t:{k}:lock", 100*time.Millisecond)
	again, err := b.Acquire(ctx, req)
	if err != nil || !again.Acquired || again.Fence != first.Fence || again.Holds != 1 {
		t.Fatalf("retry: %+v %v, want acquired, fence %d, 1 hold", again, err, first.Fence)
	}
	if pttl := rdb.PTTL(ctx, "t:{k}:lock").Val(); pttl <= ttl/2 {
		t.Fatalf("the retry did not restore the lease: PTTL %v", pttl)
	}
	if left, err := b.TTL(ctx, req.Ref); err != nil || left <= ttl/2 {
		t.Fatalf("the retry did not restore the hold's lease: TTL %v %v", left, err)
	}
	res, err := b.Release(ctx, driver.ReleaseRequest{Ref: req.Ref})
	if err != nil || !res.Held || res.Remaining != 0 {
		t.Fatalf("release: %+v %v", res, err)
	}
	if rdb.Exists(ctx, "t:{k}:lock").Val() != 0 {
		t.Fatal("one release after a retried acquire left the lock")
	}
}

func TestReentryAndRetryOfReentry(t *testing.T) {
	b, rdb := newBackend(t)
	ctx := context.Background()
	outer, _ := b.Acquire(ctx, acquireReq("r", "a", "owner", 10*time.Second))
	inner := acquireReq("r", "b", "owner", time.Second)
	r1, _ := b.Acquire(ctx, inner)
	r2, _ := b.Acquire(ctx, inner) // retry of the re-entry
	if !r1.Acquired || r1.Fence != outer.Fence || r1.Holds != 2 || r2.Holds != 2 {
		t.Fatalf("re-entry %+v, retry %+v; outer fence %d", r1, r2, outer.Fence)
	}
	if pttl := rdb.PTTL(ctx, "t:{r}:lock").Val(); pttl < 9*time.Second {
		t.Fatalf("re-entry with a shorter ttl shortened the lease to %v", pttl)
	}
	other, _ := b.Acquire(ctx, acquireReq("r", "c", "someone else", time.Second))
	if other.Acquired || other.HolderTTL < 9*time.Second {
		t.Fatalf("other owner: %+v", other)
	}
	if res, _ := b.Release(ctx, driver.ReleaseRequest{Ref: inner.Ref}); !res.Held || res.Remaining != 1 {
		t.Fatalf("inner release: %+v", res)
	}
	if res, _ := b.Release(ctx, driver.ReleaseRequest{Ref: inner.Ref}); res.Held {
		t.Fatalf("second release of the same hold: %+v, want not held", res)
	}
	if res, _ := b.Release(ctx, driver.ReleaseRequest{Ref: driver.Ref{Namespace: "t", Key: "r", Token: "a"}}); !res.Held || res.Remaining != 0 {
		t.Fatalf("outer release: %+v", res)
	}
}

// Without pub/sub, waiters poll on their retry timer: a waiter in another
// process gets the lock after a release, long before the holder's lease
// ends, without subscribing.
func TestWithoutReleaseNotifications(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	attempts := &servertest.AcquireAttempts{}
	waitRdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { waitRdb.Close() })
	waitRdb.AddHook(attempts)
	holder := fencelock.New(redisbackend.New(rdb, redisbackend.WithoutReleaseNotifications()))
	t.Cleanup(func() { holder.Close() })
	waiter := fencelock.New(redisbackend.New(waitRdb, redisbackend.WithoutReleaseNotifications()))
	t.Cleanup(func() { waiter.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const lease = 10 * time.Minute
	lk, err := holder.TryAcquire(ctx, "poll", lease)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *fencelock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		next, err := waiter.Acquire(ctx, "poll", time.Second, fencelock.WithRetry(fencelock.ConstantBackoff{Delay: 50 * time.Millisecond}))
		got <- result{next, err}
	}()
	// Release once the waiter has polled and found the lock held.
	pollUntil(t, 20*time.Second, "two acquire attempts by the waiter", func() bool { return attempts.Load() >= 2 })
	if n := rdb.PubSubNumSub(ctx, "lock:{poll}:released").Val()["lock:{poll}:released"]; n != 0 {
		t.Fatalf("%d subscribers to the release channel without notifications", n)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got // bounded by ctx, far below the holder's lease
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lk.Fence() <= lk.Fence() {
		t.Fatal("fence did not increase")
	}
	r.lk.Release(ctx)
}

// Names that would break the Cluster hash tag are refused with an error
// naming them, at once, also by a waiting Acquire.
func TestNamesThatBreakTheHashTag(t *testing.T) {
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct{ ns, key, want string }{
		{"lock", "}x", `key "}x"`},
		{"x{}", "k", `namespace "x{}"`},
		{"a}b", "k", `namespace "a}b"`},
	} {
		c := fencelock.New(redisbackend.New(rdb), fencelock.WithNamespace(tc.ns))
		_, err := c.Acquire(ctx, tc.key, time.Second)
		if !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("namespace %q key %q: %v, want an invalid-argument error naming %s", tc.ns, tc.key, err, tc.want)
		}
		c.Close()
	}
	// Braces elsewhere in a key are fine: the tag stays non-empty.
	c := fencelock.New(redisbackend.New(rdb))
	defer c.Close()
	for _, key := range []string{"a}b", "{x}", "x{", "{}"} {
		lk, err := c.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		lk.Release(ctx)
	}
}

// With WithFenceCounterExpiry the counter expires when idle, and fences
// still increase after it has gone.
func TestFenceCounterExpiry(t *testing.T) {
	b, rdb := newBackend(t, redisbackend.WithFenceCounterExpiry(time.Hour))
	ctx := context.Background()
	first, err := b.Acquire(ctx, acquireReq("e", "a", "a", time.Second))
	if err != nil || !first.Acquired {
		t.Fatal(first, err)
	}
	if ttl := rdb.PTTL(ctx, "t:{e}:fence").Val(); ttl < 59*time.Minute || ttl > time.Hour {
		t.Fatalf("counter PTTL %v, want about an hour", ttl)
	}
	b.Release(ctx, driver.ReleaseRequest{Ref: driver.Ref{Namespace: "t", Key: "e", Token: "a"}})
	rdb.Del(ctx, "t:{e}:fence") // as if it had expired
	second, err := b.Acquire(ctx, acquireReq("e", "b", "b", time.Second))
	if err != nil || second.Fence <= first.Fence {
		t.Fatalf("fence after the counter expired: %d, want above %d (%v)", second.Fence, first.Fence, err)
	}
	// Without the option the counter never expires.
	plain, rdb2 := newBackend(t)
	plain.Acquire(ctx, acquireReq("e", "a", "a", time.Second))
	if ttl := rdb2.PTTL(ctx, "t:{e}:fence").Val(); ttl != -1 {
		t.Fatalf("counter PTTL %v without the option, want none", ttl)
	}
}

// pollUntil polls cond until it holds, failing the test after limit. The
// limit only bounds a hang: make it generous (the machine may be loaded).
func pollUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		<-tick.C
	}
}

// A counter ahead of the server's clock (a clock stepped back, or fences
// minted by a server whose clock ran fast) still gives a larger fence: the
// acquire script's second write.
func TestFenceCounterAheadOfClock(t *testing.T) {
	b, rdb := newBackend(t)
	ctx := context.Background()
	// Years ahead of the clock in microseconds, and below 2^53: Lua numbers
	// are doubles.
	const ahead = int64(4_000_000_000_000_000)
	if err := rdb.Set(ctx, "t:{ahead}:fence", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := b.Acquire(ctx, acquireReq("ahead", "a", "a", time.Second))
	if err != nil || !res.Acquired || res.Fence != ahead+1 {
		t.Fatalf("acquire with the counter at %d: %+v, %v; want fence %d", ahead, res, err, ahead+1)
	}
	if v, _ := rdb.Get(ctx, "t:{ahead}:fence").Int64(); v != ahead+1 {
		t.Fatalf("counter %d after the acquire, want %d", v, ahead+1)
	}
}

// A release publishes on the lock's channel only when an acquire was
// refused while the lock was held (someone waits): an uncontended cycle
// costs no PUBLISH, which on Cluster reaches every node.
func TestReleasePublishesOnlyWhenWaited(t *testing.T) {
	b, rdb := newBackend(t)
	ctx := context.Background()
	sub := rdb.Subscribe(ctx, "t:{pub}:released")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	rel := func(token string) {
		t.Helper()
		if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: driver.Ref{Namespace: "t", Key: "pub", Token: token}}); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := b.Acquire(ctx, acquireReq("pub", "a", "a", 10*time.Second)); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	rel("a")
	if res, err := b.Acquire(ctx, acquireReq("pub", "b", "b", 10*time.Second)); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if res, err := b.Acquire(ctx, acquireReq("pub", "c", "c", 10*time.Second)); err != nil || res.Acquired {
		t.Fatal("c acquired a held lock", res, err)
	}
	rel("b")
	// Messages arrive in order: the first is b's release, so a's sent none.
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := sub.ReceiveMessage(mctx); err != nil {
		t.Fatalf("no message after the release that c waited for: %v", err)
	}
	if n := rdb.PubSubNumSub(ctx, "t:{pub}:released").Val()["t:{pub}:released"]; n != 1 {
		t.Fatalf("subscribers %d", n)
	}
	// Publish a marker: if a's release had published, the marker would not
	// be the next message.
	if err := rdb.Publish(ctx, "t:{pub}:released", "marker").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(mctx)
	if err != nil || msg.Payload != "marker" {
		t.Fatalf("next message %v, %v; want the marker (an uncontended release published)", msg, err)
	}
}

// An acquisition with Notify wakes the lock's change watchers
// (WatchRequest.Changes, for Observe), not its release watchers: a waiter woken by
// it would only find the lock taken. The release that frees the lock wakes
// both.
func TestAcquireNotifyWakesChangeWatchersOnly(t *testing.T) {
	b, _ := newBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	releases, err := b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "t", Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	defer releases.Stop()
	changes, err := b.Watch(ctx, driver.WatchRequest{Ref: driver.Ref{Namespace: "t", Key: "k"}, Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer changes.Stop()

	req := acquireReq("k", "tok1", "owner", time.Minute)
	req.Notify = true
	if res, err := b.Acquire(ctx, req); err != nil || !res.Acquired {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	select {
	case <-changes.C:
	case <-time.After(20 * time.Second):
		t.Fatal("the change watcher was not woken within 20s of an acquisition with Notify")
	}
	// One message wakes the watchers of a channel together (the receiver
	// goroutine, under one lock): had the release watcher been woken, its
	// value would be there now.
	select {
	case <-releases.C:
		t.Error("an acquisition woke a release watcher")
	default:
	}

	reentry := acquireReq("k", "tok2", "owner", time.Minute)
	reentry.Notify = true
	if res, err := b.Acquire(ctx, reentry); err != nil || res.Holds != 2 {
		t.Fatalf("re-entry: %+v, %v", res, err)
	}
	// The release that frees the lock wakes both watchers.
	for _, token := range []string{"tok2", "tok1"} {
		if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: driver.Ref{Namespace: "t", Key: "k", Token: token}, Notify: true}); err != nil {
			t.Fatal(err)
		}
	}
	for name, w := range map[string]*driver.Watch{"release": releases, "change": changes} {
		select {
		case <-w.C:
		case <-time.After(20 * time.Second):
			t.Fatalf("the %s watcher was not woken within 20s of the release that freed the lock", name)
		}
	}
}

// publishStall holds every PUBLISH until release is closed: a server that
// stalls on the notification after it answered the acquisition.
type publishStall struct {
	release chan struct{}
	seen    chan struct{} // gets a value when a PUBLISH is held
}

func (h *publishStall) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *publishStall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *publishStall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "publish" {
			select {
			case h.seen <- struct{}{}:
			default:
			}
			<-h.release
		}
		return next(ctx, cmd)
	}
}

// The notification of an acquisition (Request.Notify) is a hint sent
// off the caller's path: a PUBLISH that stalls neither holds the caller nor
// eats into the lease it was granted (were the Acquire call to wait for
// it, past its ctx with go-redis's defaults, the Client would find the
// reply too late and give the acquisition up). Nor does the one after a
// release with Notify hold the releaser.
func TestNotificationsDoNotHoldTheCaller(t *testing.T) {
	srv := servertest.Redis(t)
	stall := &publishStall{release: make(chan struct{}), seen: make(chan struct{}, 2)}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	rdb.AddHook(stall)
	b := redisbackend.New(rdb)
	t.Cleanup(func() {
		close(stall.release) // before Close, which waits for the notifications
		b.Close()
		rdb.Close()
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := acquireReq("k", "tok1", "tok1", time.Minute)
	req.Notify = true
	done := make(chan error, 1)
	go func() {
		res, err := b.Acquire(ctx, req)
		if err == nil && !res.Acquired {
			err = errors.New("not acquired")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Acquire with Notify: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Acquire with Notify did not return within 20s while its notification stalled")
	}
	select {
	case <-stall.seen:
	case <-time.After(20 * time.Second):
		t.Fatal("no notification sent for an acquisition with Notify")
	}

	rel := make(chan error, 1)
	go func() {
		_, err := b.Release(ctx, driver.ReleaseRequest{Ref: req.Ref, Notify: true})
		rel <- err
	}()
	select {
	case err := <-rel:
		if err != nil {
			t.Fatalf("Release with Notify: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Release with Notify did not return within 20s while its notification stalled")
	}
}
