package fencelockotel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelockotel"
	"github.com/fencelock/fencelock/memorybackend"
)

// shared hides the memory backend's Close from the Clients sharing it.
type shared struct{ *memorybackend.Backend }

func (shared) Close() error { return nil }

// fixedBackoff is a fallback timer without jitter, for exact attempts.
type fixedBackoff time.Duration

func (d fixedBackoff) Backoff(int) time.Duration { return time.Duration(d) }

// TestTelemetryOptions runs Clients on the memory backend under synctest,
// where durations are exact, with every option: the key as an attribute of
// the spans and of the metrics (its prefix), hold spans, buckets of our
// own. It checks every span with its times, and every metric series.
func TestTelemetryOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		tl := newTelemetry()
		prefix := func(key string) string { p, _, _ := strings.Cut(key, ":"); return p }
		tel, err := fencelockotel.New(fencelockotel.WithTracerProvider(tl.tp), fencelockotel.WithMeterProvider(tl.mp),
			fencelockotel.WithKeyAttribute(prefix), fencelockotel.WithKeyLabel(prefix), fencelockotel.WithHoldSpans(),
			fencelockotel.WithBuckets([]float64{0.1, 1}, []float64{0.5, 2}))
		if err != nil {
			t.Fatal(err)
		}
		defer tel.Close()
		holder := fencelock.New(shared{b})
		c := fencelock.New(shared{b}, fencelock.WithHooks(tel.Hooks()))
		t.Cleanup(func() { c.Close(); holder.Close() })
		start := time.Now()
		ctx, caller := tl.tp.Tracer("test").Start(context.Background(), "caller")

		o1, err := c.TryAcquire(ctx, "order:1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		o2, err := c.TryAcquire(ctx, "order:2", time.Minute) // held to the end
		if err != nil {
			t.Fatal(err)
		}
		busy, err := holder.TryAcquire(ctx, "stock:9", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan *fencelock.Lock)
		go func() {
			lk, err := c.Acquire(ctx, "stock:9", time.Minute, fencelock.WithRetry(fixedBackoff(10*time.Second)))
			if err != nil {
				t.Error(err)
			}
			waited <- lk
		}()
		synctest.Wait()
		checkLines(t, "while waiting", tl.metricLines(t, "fencelock.acquire.wait"),
			"fencelock.acquire.wait{key=order,kind=lock,outcome=acquired} count=2",
			"fencelock.held_locks{key=order,kind=lock} 2",
			"fencelock.waiters{key=stock,kind=lock} 1",
			"fencelock.renewal_failures{} 0",
			"fencelock.renewals{} 0")

		time.Sleep(1500 * time.Millisecond)
		if err := busy.Release(ctx); err != nil {
			t.Fatal(err)
		}
		stock := <-waited
		if err := o1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// A loss by deadline (no renewal), 900ms later (the ttl less the
		// safety margin).
		job, err := c.TryAcquire(ctx, "job:nightly", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		opCtx, operator := tl.tp.Tracer("test").Start(ctx, "operator")
		if _, err := c.ForceRelease(opCtx, "stock:9", "stuck"); err != nil {
			t.Fatal(err)
		}
		operator.End()
		caller.End()

		checkLines(t, "spans", tl.timedSpans(start),
			"@0s+2.5s caller parent=- {}",
			"@0s+0s fencelock.acquire parent=caller {fencelock.attempts=1,fencelock.fence=1,fencelock.key=order,fencelock.kind=lock,fencelock.outcome=acquired}",
			fmt.Sprintf("@0s+0s fencelock.acquire parent=caller {fencelock.attempts=1,fencelock.fence=%d,fencelock.key=order,fencelock.kind=lock,fencelock.outcome=acquired}", o2.Fence()),
			"@0s+1.5s fencelock.hold parent=caller {fencelock.fence=1,fencelock.key=order,fencelock.kind=lock} link=fencelock.acquire",
			fmt.Sprintf("@0s+1.5s fencelock.acquire parent=caller {fencelock.attempts=3,fencelock.fence=%d,fencelock.key=stock,fencelock.kind=lock,fencelock.outcome=acquired}"+
				" event=fencelock.wait{} event=fencelock.wait_done{fencelock.waited_seconds=1.5}", stock.Fence()),
			fmt.Sprintf(`@1.5s+1s fencelock.hold parent=caller status=Error:"lost: gone" {fencelock.fence=%d,fencelock.key=stock,fencelock.kind=lock,fencelock.reason=gone} link=fencelock.acquire`, stock.Fence()),
			fmt.Sprintf(`@2.5s+0s fencelock.lost parent=fencelock.hold status=Error:"lost: gone" {fencelock.fence=%d,fencelock.held_seconds=1,fencelock.key=stock,fencelock.kind=lock,fencelock.reason=gone}`, stock.Fence()),
			fmt.Sprintf(`@2.5s+0s fencelock.force_release parent=operator {fencelock.fence=%d,fencelock.key=stock,fencelock.kind=lock,fencelock.reason=stuck}`, stock.Fence()),
			"@2.5s+0s operator parent=caller {}",
			fmt.Sprintf("@1.5s+0s fencelock.acquire parent=caller {fencelock.attempts=1,fencelock.fence=%d,fencelock.key=job,fencelock.kind=lock,fencelock.outcome=acquired}", job.Fence()),
			fmt.Sprintf(`@1.5s+900ms fencelock.hold parent=caller status=Error:"lost: deadline" {fencelock.fence=%d,fencelock.key=job,fencelock.kind=lock,fencelock.reason=deadline} link=fencelock.acquire`, job.Fence()),
			fmt.Sprintf(`@2.4s+0s fencelock.lost parent=fencelock.hold status=Error:"lost: deadline" {fencelock.fence=%d,fencelock.held_seconds=0.9,fencelock.key=job,fencelock.kind=lock,fencelock.reason=deadline}`, job.Fence()))

		checkLines(t, "metrics", tl.metricLines(t),
			"fencelock.acquire.wait{key=job,kind=lock,outcome=acquired} count=1 sum=0 buckets=[1 0 0]",
			"fencelock.acquire.wait{key=order,kind=lock,outcome=acquired} count=2 sum=0 buckets=[2 0 0]",
			"fencelock.acquire.wait{key=stock,kind=lock,outcome=acquired} count=1 sum=1.5 buckets=[0 0 1]",
			"fencelock.hold{key=order,kind=lock} count=1 sum=1.5 buckets=[0 1 0]",
			"fencelock.held_locks{key=order,kind=lock} 1", // no series back at 0: with a key label, they go away
			"fencelock.locks.lost{key=job,kind=lock,reason=deadline} 1",
			"fencelock.locks.lost{key=stock,kind=lock,reason=gone} 1",
			"fencelock.renewal_failures{} 0",
			"fencelock.renewals{} 0")
	})
}
