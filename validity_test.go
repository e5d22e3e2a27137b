package fencelock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// validityBackend reports a validity of half the ttl, as a backend whose
// lease is shorter than asked (a quorum with clock drift) would.
type validityBackend struct{ *memorybackend.Backend }

func (b validityBackend) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := b.Backend.Acquire(ctx, req)
	if res.Acquired {
		res.Validity = req.TTL / 2
	}
	return res, err
}

func (b validityBackend) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	res, err := b.Backend.Renew(ctx, reqs)
	for i := range res {
		if res[i].Held {
			res[i].Validity = reqs[i].TTL / 2
		}
	}
	return res, err
}

// The Client's local deadline follows the validity the backend reports
// (driver.Result.Validity, driver.RenewResult.Validity), not the ttl it asked for:
// the safety margin is taken off the validity, from before the request.
func TestValidityBoundsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb := memorybackend.New()
		c := fencelock.New(validityBackend{mb})
		defer mb.Close()
		defer c.Close()
		ctx := context.Background()
		start := time.Now()
		lk, err := c.Acquire(ctx, "k", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Validity 5s, less the default margin of 10%.
		if got, want := lk.Deadline().Sub(start), 4500*time.Millisecond; got != want {
			t.Fatalf("deadline %v after the acquire, want %v (90%% of the 5s validity)", got, want)
		}
		time.Sleep(time.Second)
		if err := lk.Refresh(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if got, want := lk.Deadline().Sub(start), time.Second+9*time.Second; got != want {
			t.Fatalf("deadline %v after a refresh at 1s, want %v (90%% of the 10s validity)", got, want)
		}
		// Without renewal the lock is lost at that deadline.
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if lk.Held() {
			t.Fatalf("still held at %v, past its deadline", time.Since(start))
		}
	})
}
