package fencelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// maxClientCycleAllocs bounds what the Client allocates, beyond the
// backend's own two calls, per uncontended Acquire and Release under a
// request context: the Lock and its token, the wait's cancelable context
// (with the request context's done channel and child set) and the release
// attempt's deadline (a context and its timer).
const maxClientCycleAllocs = 12

// TestClientCycleAllocs keeps the Client's own allocations per uncontended
// acquire+release at maxClientCycleAllocs, over the in-memory backend,
// whose allocations are deterministic. Both sides get the same fresh
// request context (context.WithTimeout), as in BenchmarkClientOverhead; the
// least of three counts is taken, since the Client's goroutines may
// allocate meanwhile.
func TestClientCycleAllocs(t *testing.T) {
	be := memorybackend.New()
	c := fencelock.New(be)
	defer c.Close()
	const ttl = 10 * time.Second
	ref := driver.Ref{Key: "backend", Token: "token"}
	backendCycle := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := be.Acquire(ctx, driver.Request{Ref: ref, Owner: ref.Token, TTL: ttl})
		if err == nil {
			_, err = be.Release(ctx, driver.ReleaseRequest{Ref: ref})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	clientCycle := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		lk, err := c.Acquire(ctx, "client", ttl)
		if err == nil {
			err = lk.Release(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	least := func(f func()) float64 {
		f() // one-time growth
		m := testing.AllocsPerRun(200, f)
		for range 2 {
			m = min(m, testing.AllocsPerRun(200, f))
		}
		return m
	}
	backend, client := least(backendCycle), least(clientCycle)
	if own := client - backend; own > maxClientCycleAllocs+raceAllocs {
		t.Errorf("an uncontended Acquire+Release allocates %v times in the Client (%v in all, %v in the backend), want at most %d",
			own, client, backend, maxClientCycleAllocs+raceAllocs)
	}
}
