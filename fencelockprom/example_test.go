package fencelockprom_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelockprom"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Register the metrics, pass their hooks to the Client, and serve them as
// usual (here they are printed instead).
func Example() {
	// REDIS_ADDR is your Redis's host:port; empty means go-redis's
	// default, localhost:6379.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	metrics := fencelockprom.New()
	reg.MustRegister(metrics)
	locks := fencelock.New(redisbackend.New(rdb), fencelock.WithHooks(metrics.Hooks()))
	defer locks.Close()
	// http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	ctx := context.Background()
	lk, err := locks.TryAcquire(ctx, "report:daily", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := locks.TryAcquire(ctx, "report:daily", time.Minute); errors.Is(err, fencelock.ErrNotAcquired) {
		fmt.Println("another instance has the report")
	}

	families, err := reg.Gather() // while the lock is held
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := lk.Release(ctx); err != nil {
		fmt.Println(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			switch {
			case f.GetName() == "fencelock_held_locks" && m.GetGauge().GetValue() > 0:
				fmt.Printf("%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue())
			case f.GetName() == "fencelock_acquire_wait_seconds":
				fmt.Printf("%s_count{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetHistogram().GetSampleCount())
			}
		}
	}
	// Output:
	// another instance has the report
	// fencelock_acquire_wait_seconds_count{kind="lock",outcome="acquired"} 1
	// fencelock_acquire_wait_seconds_count{kind="lock",outcome="not_acquired"} 1
	// fencelock_held_locks{kind="lock"} 1
}
