package fencelockotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelockotel"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
)

// scriptRedis runs the scripted run of the tests against a real
// redis-server, with hooks on both Clients: an uncontended acquire, a
// TryAcquire refused, an acquire that waits for the release of the first,
// its release, a lock renewed, then force-released by the other Client and
// thereby lost. ctx carries the caller's span, opCtx the operator's. It
// returns the fences of the locks taken ("a" twice, then "r") once the
// loss has been reported to every hook.
func scriptRedis(t *testing.T, ctx, opCtx context.Context, hooks ...fencelock.Hooks) (fences []int64) {
	t.Helper()
	srv := servertest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	// The script's own hooks come last: when they are called, the others
	// have been.
	waiting, renewed, lost := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	var opts []fencelock.Option
	for _, h := range hooks {
		opts = append(opts, fencelock.WithHooks(h))
	}
	opts = append(opts, fencelock.WithHooks(fencelock.Hooks{
		WaitStart:   func(context.Context, fencelock.WaitEvent) { signal(waiting) },
		RenewalDone: func(fencelock.RenewalEvent) { signal(renewed) },
		Lost:        func(fencelock.LostEvent) { signal(lost) },
	}))
	c1 := fencelock.New(redisbackend.New(rdb), opts...)
	c2 := fencelock.New(redisbackend.New(rdb), opts...)
	t.Cleanup(func() { c1.Close(); c2.Close() })

	a, err := c1.TryAcquire(ctx, "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.TryAcquire(ctx, "a", 10*time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	waited := make(chan *fencelock.Lock)
	go func() {
		lk, err := c2.Acquire(ctx, "a", 10*time.Second, fencelock.WithWait(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		waited <- lk
	}()
	receive(t, waiting, "the second acquire of a to wait")
	time.Sleep(20 * time.Millisecond) // a hold and a wait of at least 20ms, which the metrics must show (load only lengthens them)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-waited
	if b == nil {
		t.FailNow()
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}

	r, err := c1.Acquire(ctx, "r", 10*time.Second, fencelock.WithAutoRenew(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	receive(t, renewed, "a renewal of r")
	if _, err := c2.ForceRelease(opCtx, "r", "stuck"); err != nil {
		t.Fatal(err)
	}
	receive(t, lost, "the loss of r")
	return []int64{a.Fence(), b.Fence(), r.Fence()}
}

// receive waits for a value on c, for up to 10 seconds.
func receive(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
	}
}

// TestTelemetryRedis runs the scripted run against a real redis-server and
// checks every span and metric series Telemetry made of it, with the
// defaults: no key attribute, no hold spans.
func TestTelemetryRedis(t *testing.T) {
	tl := newTelemetry()
	tel, err := fencelockotel.New(fencelockotel.WithTracerProvider(tl.tp), fencelockotel.WithMeterProvider(tl.mp))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	tracer := tl.tp.Tracer("test")
	ctx, script := tracer.Start(context.Background(), "script")
	opCtx, operator := tracer.Start(ctx, "operator")
	f := scriptRedis(t, ctx, opCtx, tel.Hooks())
	operator.End()
	script.End()

	// The waiter's attempts: one before its wait, others until the release woke it.
	spans := tl.endedSpans("fencelock.waited_seconds", "fencelock.held_seconds")
	for i, s := range spans {
		if strings.Contains(s, "event=fencelock.wait{}") {
			if n := attempts(s); n < 2 {
				t.Errorf("the waiter made %d attempts, want at least 2: %s", n, s)
			}
			spans[i] = strings.Replace(s, fmt.Sprintf("fencelock.attempts=%d", attempts(s)), "fencelock.attempts=N", 1)
		}
	}
	checkLines(t, "spans", spans,
		fmt.Sprintf("fencelock.acquire parent=script {fencelock.attempts=1,fencelock.fence=%d,fencelock.kind=lock,fencelock.outcome=acquired}", f[0]),
		"fencelock.acquire parent=script {fencelock.attempts=1,fencelock.kind=lock,fencelock.outcome=not_acquired}",
		fmt.Sprintf("fencelock.acquire parent=script {fencelock.attempts=N,fencelock.fence=%d,fencelock.kind=lock,fencelock.outcome=acquired}"+
			" event=fencelock.wait{} event=fencelock.wait_done{fencelock.waited_seconds=*}", f[1]),
		fmt.Sprintf("fencelock.acquire parent=script {fencelock.attempts=1,fencelock.fence=%d,fencelock.kind=lock,fencelock.outcome=acquired}", f[2]),
		fmt.Sprintf(`fencelock.force_release parent=operator {fencelock.fence=%d,fencelock.kind=lock,fencelock.reason=stuck}`, f[2]),
		fmt.Sprintf(`fencelock.lost parent=- status=Error:"lost: gone" {fencelock.fence=%d,fencelock.held_seconds=*,fencelock.kind=lock,fencelock.reason=gone}`, f[2]),
		"operator parent=script {}",
		"script parent=- {}")

	lines := tl.metricLines(t, "fencelock.acquire.wait", "fencelock.hold", "fencelock.renewal_batch", "fencelock.renewals", "fencelock.renewal_failures")
	var renewals []string
	lines = slices.DeleteFunc(lines, func(l string) bool {
		if strings.HasPrefix(l, "fencelock.renewal") {
			renewals = append(renewals, l)
			return true
		}
		return false
	})
	checkLines(t, "metrics", lines,
		"fencelock.acquire.wait{kind=lock,outcome=acquired} count=3",
		"fencelock.acquire.wait{kind=lock,outcome=not_acquired} count=1",
		"fencelock.hold{kind=lock} count=2",
		"fencelock.held_locks{kind=lock} 0",
		"fencelock.held_locks{kind=read} 0",
		"fencelock.held_locks{kind=semaphore} 0",
		"fencelock.held_locks{kind=write} 0",
		"fencelock.locks.lost{kind=lock,reason=gone} 1",
		"fencelock.waiters{kind=lock} 0",
		"fencelock.waiters{kind=read} 0",
		"fencelock.waiters{kind=semaphore} 0",
		"fencelock.waiters{kind=write} 0")
	// Renewals: at least one batch of one (the failures depend on the
	// machine's load: a renewal has 25ms to get its answer).
	checkLines(t, "renewal metrics", renewals,
		"fencelock.renewal_batch{} count="+strings.TrimPrefix(metricValue(renewals, "fencelock.renewal_batch{}"), "count="),
		"fencelock.renewal_failures{} *",
		"fencelock.renewals{} *")
	if v := metricValue(renewals, "fencelock.renewal_batch{}"); v == "count=0" {
		t.Errorf("fencelock.renewal_batch %s after a renewal", v)
	}

	// The wait and the hold: at least 20ms each (the first holder held the
	// lock that long, and the waiter waited for it).
	exact := tl.metricLines(t)
	for _, series := range []string{"fencelock.acquire.wait{kind=lock,outcome=acquired}", "fencelock.hold{kind=lock}"} {
		var count int
		var sum float64
		if _, err := fmt.Sscanf(metricValue(exact, series), "count=%d sum=%g", &count, &sum); err != nil || sum < 0.02 {
			t.Errorf("%s: %q, want a sum of at least 0.02", series, metricValue(exact, series))
		}
	}
}

// attempts returns the value of fencelock.attempts in a span's description.
func attempts(span string) int {
	_, after, _ := strings.Cut(span, "fencelock.attempts=")
	var n int
	fmt.Sscanf(after, "%d", &n)
	return n
}

var _ = attribute.Key("")
