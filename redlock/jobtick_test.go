package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
	"github.com/redis/go-redis/v9"
)

// The job-tick record over a quorum (see jobtick.go): which answers of
// the masters make a tick claimed, and that a split of the masters
// between two attempts is undone rather than leaving the tick claimed by
// nobody. The masters' records are set up through a redisbackend.Backend
// of each, as a claim in flight (its hold released, its record left)
// would leave them.

// tickReq is an attempt of token for tick on the lock "job".
func tickReq(token, tick string) driver.TickRequest {
	return driver.TickRequest{
		Request: driver.Request{Ref: driver.Ref{Namespace: "ns", Key: "job", Token: token}, Owner: token, TTL: 10 * time.Second},
		Tick:    tick, RecordLife: time.Minute,
	}
}

// claimOn leaves, on each of the masters clients, the record of a claim of
// tick by token, without its hold.
func claimOn(t *testing.T, ctx context.Context, clients []redis.UniversalClient, token, tick string) {
	t.Helper()
	for _, c := range clients {
		b := redisbackend.New(c)
		res, err := b.AcquireTick(ctx, tickReq(token, tick))
		if err != nil || !res.Acquired {
			t.Fatalf("claim of %s by %s on a master: %+v, %v", tick, token, res, err)
		}
		if _, err := b.Release(ctx, driver.ReleaseRequest{Ref: tickReq(token, tick).Ref}); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
}

// A minority's record does not make the tick claimed: it cannot be the
// record of a claim that counted (that claim's majority would share a
// master with this attempt's). A majority of grants takes the tick.
func TestTickMinorityClaimDoesNotRefuse(t *testing.T) {
	_, clients := masters(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	claimOn(t, ctx, clients[:1], "z", "t1")
	b := newRedlock(t, clients)
	defer b.Close()
	res, err := b.AcquireTick(ctx, tickReq("a", "t1"))
	if err != nil || !res.Acquired || res.Claimed {
		t.Fatalf("with one master of 3 naming another claim: %+v, %v; want acquired", res, err)
	}
}

// A majority naming one claim makes the tick claimed; the attempt's grant
// on the other master is undone, its record too.
func TestTickMajorityClaimRefuses(t *testing.T) {
	_, clients := masters(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	claimOn(t, ctx, clients[:2], "z", "t1")
	b := newRedlock(t, clients)
	defer b.Close()
	res, err := b.AcquireTick(ctx, tickReq("a", "t1"))
	if err != nil || res.Acquired || !res.Claimed || res.LastTick != "t1" || res.LastToken != "z" {
		t.Fatalf("with 2 masters of 3 naming z's claim: %+v, %v; want claimed by z", res, err)
	}
	third := redisbackend.New(clients[2])
	defer third.Close()
	if r, err := third.AcquireTick(ctx, tickReq("q", "t1")); err != nil || !r.Acquired {
		t.Fatalf("on the third master, after the undo: %+v, %v; want acquired (the refused attempt's claim undone)", r, err)
	}
}

// Two claims in flight that split the masters (neither a majority) do not
// make the tick claimed: the attempt is refused without a claim and
// undone; once they are undone too, the tick is taken.
func TestTickSplitClaimsAreUndone(t *testing.T) {
	_, clients := masters(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	claimOn(t, ctx, clients[:1], "x", "t1")
	claimOn(t, ctx, clients[1:2], "y", "t1")
	b := newRedlock(t, clients)
	defer b.Close()
	res, err := b.AcquireTick(ctx, tickReq("a", "t1"))
	if err != nil || res.Acquired || res.Claimed {
		t.Fatalf("with the masters split between claims x and y: %+v, %v; want refused, not claimed", res, err)
	}
	for i, token := range []string{"x", "y"} {
		nb := redisbackend.New(clients[i])
		if undone, err := nb.UndoTickClaim(ctx, "ns", "job", token); err != nil || !undone {
			t.Fatalf("undo of %s's claim: %v, %v", token, undone, err)
		}
		nb.Close()
	}
	res, err = b.AcquireTick(ctx, tickReq("a", "t1"))
	if err != nil || !res.Acquired {
		t.Fatalf("after the other claims were undone: %+v, %v; want acquired (the first attempt left nothing)", res, err)
	}
}

// Instances racing for every tick over 3 masters: each tick runs exactly
// once, and none is left unrun (a split between instances is undone and
// retried within the tick's period). The ticks are an hour apart, in the
// future, so that no period ends during the test.
func TestTickRaceRunsEveryTickOnce(t *testing.T) {
	_, clients := masters(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const instances, ticks = 4, 15
	var cs []*fencelock.Client
	for range instances {
		b, err := redlock.New(clients, redlock.WithNodeTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		c := fencelock.New(b)
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	job := fencelock.Job{Name: "race", Period: time.Hour, LockAtMost: 10 * time.Second}
	base := time.Now().Truncate(time.Hour).Add(time.Hour)
	var mu sync.Mutex
	runs := map[int]int{}
	for tick := range ticks {
		scheduled := base.Add(time.Duration(tick) * time.Hour)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range cs {
			wg.Go(func() {
				<-start
				_, err := c.RunJob(ctx, job, scheduled, func(context.Context, *fencelock.Lock) error {
					mu.Lock()
					runs[tick]++
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Errorf("tick %d, instance %d: %v", tick, i, err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	for tick := range ticks {
		if runs[tick] != 1 {
			t.Errorf("tick %d ran %d times, want once", tick, runs[tick])
		}
	}
	if t.Failed() {
		t.Logf("runs per tick: %v", fmt.Sprint(runs))
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the race did not finish within 60s")
	}
}
