package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// Deterministic tests of grants (driver.Turn.Grant): a release hands the
// lock to the first fair waiter, which takes it without a round trip. The
// real-server tests are in redisbackend/fair_test.go.

// grantShared lets several Clients share a backend that grants (it hides
// Close).
type grantShared struct {
	driver.Store
	driver.Notifier
	driver.Lines
}

// grantEnv is fairEnv with grants.
func grantEnv(t *testing.T) (*fairBackend, func(name string, opts ...fencelock.Option) *fencelock.Client) {
	b := &fairBackend{Backend: memorybackend.New(), start: time.Now(), attempts: map[string][]time.Duration{}}
	t.Cleanup(func() { b.Close() })
	b.DisableHandOff() // grants alone
	return b, func(name string, opts ...fencelock.Option) *fencelock.Client {
		var n atomic.Int64
		gen := fencelock.WithTokenGenerator(func() (string, error) { return fmt.Sprintf("%s%d", name, n.Add(1)), nil })
		c := fencelock.New(grantShared{b, b, b}, append([]fencelock.Option{gen}, opts...)...)
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// acquireAsync calls Acquire on a goroutine of its own and delivers the
// Lock (nil after an error, which fails t).
func acquireAsync(t *testing.T, c *fencelock.Client, key string, ttl time.Duration, opts ...fencelock.AcquireOption) <-chan *fencelock.Lock {
	got := make(chan *fencelock.Lock, 1)
	go func() {
		lk, err := c.Acquire(context.Background(), key, ttl, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	return got
}

// A release hands the lock to the first fair waiter: it holds the lock at
// the instant of the release without another attempt, with a new fence.
func TestFairGrantHandsOffWithoutAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := grantEnv(t)
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", time.Second, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, client("w"), "k", time.Second, fencelock.WithFairness())
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		before := len(b.attemptsOf("w1"))
		releasedAt := time.Since(b.start)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		if at := time.Since(b.start); at != releasedAt {
			t.Fatalf("the waiter got the lock at %v, want at the release (%v)", at, releasedAt)
		}
		if after := len(b.attemptsOf("w1")); after != before {
			t.Fatalf("the waiter made %d attempts after the release, want none (the release granted it)", after-before)
		}
		if b.Grants() != 1 {
			t.Fatalf("%d grants, want 1", b.Grants())
		}
		if lk.Fence() <= holder.Fence() {
			t.Fatalf("granted fence %d, not above the holder's %d", lk.Fence(), holder.Fence())
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("releasing the granted lock: %v", err)
		}
	})
}

// The granted lease is counted from when the waiter sent the attempt the
// grant names (its latest before the release), not from the release: the
// local deadline can never pass the store's.
func TestFairGrantLeaseCountsFromAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := grantEnv(t)
		ctx := context.Background()
		const ttl = time.Second
		holder, err := client("h").Acquire(ctx, "k", time.Minute, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		// Attempts every place renewal only (driver.PlaceLease/3).
		got := acquireAsync(t, client("w", fencelock.WithSafetyMargin(0.01)), "k", ttl,
			fencelock.WithFairness(), fencelock.WithRetry(obsFixedBackoff(time.Minute)))
		// Release between two of the waiter's place renewals.
		time.Sleep(driver.PlaceLease/3 + 200*time.Millisecond)
		synctest.Wait()
		attempts := b.attemptsOf("w1")
		last := b.start.Add(attempts[len(attempts)-1])
		holder.Release(ctx)
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		if time.Since(last) < 200*time.Millisecond {
			t.Fatalf("the release came %v after the waiter's last attempt; the test needs a gap", time.Since(last))
		}
		want := last.Add(ttl - ttl/100)
		if got := lk.Deadline(); !got.Equal(want) {
			t.Fatalf("granted lock's deadline %v after its last attempt, want %v (the ttl less the margin, from the attempt)", got.Sub(last), want.Sub(last))
		}
		// It ends there, not a ttl after the release.
		time.Sleep(time.Until(want) - time.Millisecond)
		if err := lk.Err(); err != nil {
			t.Fatalf("lost before its deadline: %v", err)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if err := lk.Err(); !errors.Is(err, fencelock.ErrLost) {
			t.Fatalf("at its deadline, Err = %v, want ErrLost", err)
		}
	})
}

// A grant whose announcement is lost is taken by the waiter's next attempt
// (a retry of its token): same fence, no second hold.
func TestFairGrantNoticeLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := grantEnv(t)
		b.LoseGrantNotices(true)
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", time.Second, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, client("w"), "k", time.Second, fencelock.WithFairness())
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		releasedAt := time.Since(b.start)
		holder.Release(ctx)
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		if b.Grants() != 1 {
			t.Fatalf("%d grants, want 1", b.Grants())
		}
		if late := time.Since(b.start) - releasedAt; late > driver.PlaceLease/3 {
			t.Fatalf("the waiter took the granted lock %v after the release, want within a place renewal (%v)", late, driver.PlaceLease/3)
		}
		if lk.Holds() != 1 {
			t.Fatalf("holds %d, want 1 (the attempt completes the grant, it does not re-enter)", lk.Holds())
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("releasing the granted lock: %v", err)
		}
	})
}

// A waiter with a ttl longer than driver.PlaceLease is granted driver.PlaceLease,
// and extends it to its ttl in the background once a third of the granted
// lease has passed: without automatic renewal it still holds the lock for
// its whole ttl.
func TestFairGrantLongTTLIsExtended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := grantEnv(t)
		ctx := context.Background()
		const ttl = 30 * time.Second
		holder, err := client("h").Acquire(ctx, "k", time.Second, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, client("w"), "k", ttl, fencelock.WithFairness())
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		renews := b.Calls(memorybackend.Renew).Applied
		releasedAt := time.Now()
		holder.Release(ctx)
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		synctest.Wait()
		if n := b.Calls(memorybackend.Renew).Applied - renews; n != 0 {
			t.Fatalf("%d renewals at the grant, want none before a third of the granted lease", n)
		}
		granted := lk.Deadline().Sub(releasedAt)
		time.Sleep(granted/3 + time.Millisecond)
		synctest.Wait()
		if n := b.Calls(memorybackend.Renew).Applied - renews; n != 1 {
			t.Fatalf("%d renewals a third of the granted lease (%v) after the grant, want 1", n, granted)
		}
		if d := lk.Deadline().Sub(releasedAt); d < ttl-ttl/10 {
			t.Fatalf("deadline %v after the grant, want about the ttl %v", d, ttl)
		}
		time.Sleep(ttl / 2)
		if err := lk.Err(); err != nil {
			t.Fatalf("lost halfway through its ttl: %v", err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A granted lock released before a third of its granted lease has passed
// is never extended: the hand-off costs the release's script alone.
func TestFairGrantShortHoldIsNotExtended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := grantEnv(t)
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", time.Second, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, client("w"), "k", 30*time.Second, fencelock.WithFairness())
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		renews := b.Calls(memorybackend.Renew).Applied
		holder.Release(ctx)
		lk := <-got
		if lk == nil {
			t.FailNow()
		}
		time.Sleep(100 * time.Millisecond) // the critical section
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(driver.PlaceLease)
		synctest.Wait()
		if n := b.Calls(memorybackend.Renew).Applied - renews; n != 0 {
			t.Fatalf("%d renewals of a granted lock held for 100ms, want none", n)
		}
	})
}

// Without grants (a backend that only wakes), the hand-off still happens at
// the release, with one attempt.
func TestFairWithoutGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := grantEnv(t)
		b.DisableGrants()
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", time.Second, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, client("w"), "k", time.Second, fencelock.WithFairness())
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		before := len(b.attemptsOf("w1"))
		holder.Release(ctx)
		if lk := <-got; lk == nil {
			t.FailNow()
		}
		if n := len(b.attemptsOf("w1")) - before; n != 1 || b.Grants() != 0 {
			t.Fatalf("%d attempts after the release and %d grants, want 1 and 0", n, b.Grants())
		}
	})
}

// A fair waiter that is told when its turn comes (a grant, or a wake-up
// to it alone) does not poll: while the holder keeps the lock, it makes an
// attempt only to renew its place, every third of driver.PlaceLease, not at
// the retry backoff (10 ms, 20 ms, 40 ms, ...), where with 16 waiters the
// polls would cost 5 attempts per hand-off.
func TestFairWaiterDoesNotPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := grantEnv(t)
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", 10*time.Second, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(t, client("w"), "k", 10*time.Second, fencelock.WithFairness())
		time.Sleep(driver.PlaceLease - time.Millisecond)
		synctest.Wait()
		renew := driver.PlaceLease / 3
		// Joining, once more after subscribing (a release in between would
		// go unnoticed), then renewing the place.
		want := []time.Duration{0, 0, renew, 2 * renew}
		if at := b.attemptsOf("w1"); fmt.Sprint(at) != fmt.Sprint(want) {
			t.Errorf("waiter's attempts at %v, want %v", at, want)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if lk := <-got; lk == nil || !lk.Held() {
			t.Fatalf("waiter did not get the lock on release: %v", lk)
		}
	})
}

// A fair waiter that comes while another call of its Client already waits
// for the key (and so watches it) watches before its first attempt: it
// joins the line with one attempt, not with one more after subscribing
// (that second attempt would be a third of the scripts of a busy fair
// line's hand-off). Both are granted the lock in turn, without attempts.
func TestFairWaiterJoinsWithOneAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := grantEnv(t)
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", 10*time.Second, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		waiters := client("w")
		first := acquireAsync(t, waiters, "k", 10*time.Second, fencelock.WithFairness())
		synctest.Wait()
		second := acquireAsync(t, waiters, "k", 10*time.Second, fencelock.WithFairness())
		synctest.Wait()
		// The first found no one of its Client watching: it joins, and
		// attempts once more once it watches (a release in between would
		// go unnoticed). The second joins with one attempt.
		if n1, n2 := len(b.attemptsOf("w1")), len(b.attemptsOf("w2")); n1 != 2 || n2 != 1 {
			t.Fatalf("attempts: %d by the first waiter, %d by the second; want 2 and 1", n1, n2)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lk1 := <-first
		if lk1 == nil {
			t.FailNow()
		}
		if err := lk1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lk2 := <-second
		if lk2 == nil {
			t.FailNow()
		}
		if n1, n2 := len(b.attemptsOf("w1")), len(b.attemptsOf("w2")); n1 != 2 || n2 != 1 {
			t.Fatalf("after the hand-offs: %d attempts by the first waiter, %d by the second; want 2 and 1 (granted)", n1, n2)
		}
		if lk2.Fence() <= lk1.Fence() || lk1.Fence() <= holder.Fence() {
			t.Fatalf("fences %d, %d, %d: not increasing", holder.Fence(), lk1.Fence(), lk2.Fence())
		}
		lk2.Release(ctx)
	})
}
