package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// Deterministic tests of WithFairness over the memory backend's line of
// waiters, under testing/synctest (virtual time). The real-server tests are
// in redisbackend/fair_test.go.

// fairBackend is a memory backend that records each fair attempt's time by
// token.
type fairBackend struct {
	*memorybackend.Backend
	start time.Time

	mu       sync.Mutex
	attempts map[string][]time.Duration
}

// AcquireInLine records the time of each attempt of a waiter in line.
func (b *fairBackend) AcquireInLine(ctx context.Context, req driver.Request, t driver.Turn) (driver.Result, error) {
	b.mu.Lock()
	b.attempts[req.Token] = append(b.attempts[req.Token], time.Since(b.start))
	b.mu.Unlock()
	return b.Backend.AcquireInLine(ctx, req, t)
}

func (b *fairBackend) attemptsOf(token string) []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.attempts[token])
}

// fairShared lets several Clients share the backend (it hides Close).
type fairShared struct {
	driver.Store
	driver.Notifier
	driver.Lines
}

// fairEnv makes the backend and returns a maker of Clients on it whose
// tokens are name1, name2, ...
func fairEnv(t *testing.T) (*fairBackend, func(name string) *fencelock.Client) {
	b := &fairBackend{Backend: memorybackend.New(), start: time.Now(), attempts: map[string][]time.Duration{}}
	t.Cleanup(func() { b.Close() })
	b.DisableGrants() // a line without grants, nor hand-offs: each waiter takes its turn itself
	b.DisableHandOff()
	return b, func(name string) *fencelock.Client {
		var n atomic.Int64
		gen := fencelock.WithTokenGenerator(func() (string, error) { return fmt.Sprintf("%s%d", name, n.Add(1)), nil })
		c := fencelock.New(fairShared{b, b, b}, gen)
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// A fair waiter behind a long holder renews its place every third of
// driver.PlaceLease, so the place never lapses however long it waits; the lock
// goes to it at the instant of the release.
func TestFairWaiterRenewsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := fairEnv(t)
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", time.Minute, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Duration, 1)
		go func() {
			lk, err := client("w").Acquire(ctx, "k", time.Minute, fencelock.WithFairness())
			if err != nil {
				t.Error(err)
				got <- 0
				return
			}
			got <- time.Since(b.start)
			lk.Release(ctx)
		}()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if at := <-got; at != 20*time.Second {
			t.Fatalf("the waiter got the lock at %v, want at the release (20s)", at)
		}
		attempts := b.attemptsOf("w1")
		for i := 1; i < len(attempts); i++ {
			if gap := attempts[i] - attempts[i-1]; gap > driver.PlaceLease/3 {
				t.Fatalf("attempts at %v: a gap of %v, longer than a third of the place's lease %v", attempts, gap, driver.PlaceLease)
			}
		}
		if n := len(attempts); n < int(20*time.Second/(driver.PlaceLease/3)) {
			t.Fatalf("%d attempts in 20s, want one every %v at least", n, driver.PlaceLease/3)
		}
	})
}

// Waiters of several Clients get the lock in the order they joined the
// line, each at the instant the one before releases it.
func TestFairHandOffOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := fairEnv(t)
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", time.Minute, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		type turn struct {
			who int
			at  time.Duration
		}
		turns := make(chan turn, 4)
		for i := range 4 {
			c := client(fmt.Sprint("c", i))
			go func() {
				lk, err := c.Acquire(ctx, "k", time.Minute, fencelock.WithFairness())
				if err != nil {
					t.Error(err)
					return
				}
				turns <- turn{i, time.Since(b.start)}
				time.Sleep(time.Second) // hold it for a second
				lk.Release(ctx)
			}()
			time.Sleep(time.Millisecond) // the next one joins the line after this one
			synctest.Wait()
		}
		time.Sleep(time.Second)
		releasedAt := time.Since(b.start)
		holder.Release(ctx)
		var got []turn
		for range 4 {
			got = append(got, <-turns)
		}
		time.Sleep(time.Second) // the last one releases
		for i, g := range got {
			if want := releasedAt + time.Duration(i)*time.Second; g.who != i || g.at != want {
				t.Fatalf("turns %v: turn %d went to waiter %d at %v, want waiter %d at %v", got, i, g.who, g.at, i, want)
			}
		}
	})
}

// A fair waiter that gives up leaves the line at once: the one behind it
// gets the lock at the release, not after the leaver's place lapses.
func TestFairGiveUpLeavesLineAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, client := fairEnv(t)
		ctx := context.Background()
		holder, err := client("h").Acquire(ctx, "k", time.Minute, fencelock.WithFairness())
		if err != nil {
			t.Fatal(err)
		}
		quitter, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		quitErr := make(chan error, 1)
		go func() {
			_, err := client("q").Acquire(quitter, "k", time.Minute, fencelock.WithFairness())
			quitErr <- err
		}()
		time.Sleep(time.Millisecond)
		got := make(chan time.Duration, 1)
		go func() {
			lk, err := client("w").Acquire(ctx, "k", time.Minute, fencelock.WithFairness())
			if err != nil {
				t.Error(err)
				return
			}
			got <- time.Since(b.start)
			lk.Release(ctx)
		}()
		if err := <-quitErr; !errors.Is(err, fencelock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the quitter: %v", err)
		}
		time.Sleep(time.Millisecond) // the background release of its place
		synctest.Wait()
		releasedAt := time.Since(b.start)
		holder.Release(ctx)
		if at := <-got; at != releasedAt {
			t.Fatalf("the waiter behind the quitter got the lock at %v, want at the release (%v)", at, releasedAt)
		}
	})
}

// WithFairness on a backend without a line of waiters fails with
// ErrUnsupported, naming the capability, before anything is sent.
func TestFairUnsupported(t *testing.T) {
	b := memorybackend.New()
	c := fencelock.New(struct{ driver.Store }{b})
	defer c.Close()
	defer b.Close()
	_, err := c.Acquire(context.Background(), "k", time.Minute, fencelock.WithFairness())
	if !errors.Is(err, fencelock.ErrUnsupported) {
		t.Fatalf("WithFairness on a store without Lines: %v, want ErrUnsupported", err)
	}
	if calls := b.Calls(memorybackend.Acquire); calls.Attempted != 0 {
		t.Fatalf("%d acquire attempts were made", calls.Attempted)
	}
}
