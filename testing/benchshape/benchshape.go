// Package benchshape is the one benchmark every backend runs for the cost
// row of "Choosing one" in docs/backends.md, so that the figures compare: the
// Redis topologies (redisbackend's BenchmarkTopologies), Redlock
// (redlock's BenchmarkRedlock) and etcd (etcdbackend's benchmark).
//
// It is the test harness of fencelock's own modules (the library, cmd,
// etcdbackend, fencelockprom), public so that each of them can use it; it
// is not part of the library's API, and no library package imports it.
package benchshape

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Run runs two sub-benchmarks on c:
//   - "serial": one goroutine's Acquire+Release cycles, each with a request
//     context of 10 s, as an HTTP handler would; reports ops/s,
//     acquire-p50-µs (the median Acquire) and cycle-p50-µs (the median
//     Acquire+Release);
//   - "parallel64": 64 goroutines cycling on distinct keys; reports ops/s.
func Run(b *testing.B, c *fencelock.Client) {
	b.Run("serial", func(b *testing.B) {
		lat := make([]time.Duration, 0, 1<<16)
		cycles := make([]time.Duration, 0, 1<<16)
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			lk, err := c.Acquire(ctx, "serial", 10*time.Second)
			if err == nil {
				lat = append(lat, time.Since(start))
				err = lk.Release(ctx)
				cycles = append(cycles, time.Since(start))
			}
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		opsPerSec(b)
		if len(lat) > 0 {
			slices.Sort(lat)
			slices.Sort(cycles)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "acquire-p50-µs")
			b.ReportMetric(float64(cycles[len(cycles)/2].Microseconds()), "cycle-p50-µs")
		}
	})
	b.Run("parallel64", func(b *testing.B) {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((64 + procs - 1) / procs)
		var ids atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("parallel-%d", ids.Add(1))
			for pb.Next() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				lk, err := c.Acquire(ctx, key, 10*time.Second)
				if err == nil {
					err = lk.Release(ctx)
				}
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		opsPerSec(b)
	})
}

func opsPerSec(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "ops/s")
	}
}
