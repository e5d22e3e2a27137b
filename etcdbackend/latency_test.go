package etcdbackend_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Serial TryAcquire and Release latency (docs/backends.md, etcd) on
// the shared 3-member cluster (loopback, no fsync). Logged, not asserted:
// the machine is shared, and timing is not what this test checks; it
// checks that 200 acquire/release cycles in a row all succeed.
func TestAcquireLatency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	locks := newLocks(t)
	const n = 200
	acq := make([]time.Duration, 0, n)
	rel := make([]time.Duration, 0, n)
	start := time.Now()
	for range n {
		t0 := time.Now()
		lk, err := locks.TryAcquire(ctx, "k", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		acq, rel = append(acq, t1.Sub(t0)), append(rel, time.Since(t1))
	}
	elapsed := time.Since(start)
	slices.Sort(acq)
	slices.Sort(rel)
	q := func(d []time.Duration, f float64) time.Duration {
		return d[int(f*float64(len(d)-1))].Round(10 * time.Microsecond)
	}
	t.Logf("%d cycles in %v (%.0f/s): acquire p50 %v p99 %v, release p50 %v p99 %v",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), q(acq, 0.5), q(acq, 0.99), q(rel, 0.5), q(rel, 0.99))
}
