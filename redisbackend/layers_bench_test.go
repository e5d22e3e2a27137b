package redisbackend_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// layersBlock is how many cycles a layer of BenchmarkLayers runs before the
// next layer takes its turn: long enough for each layer's code to be warm,
// short enough that a change in the machine's speed falls on every layer.
const layersBlock = 100

// layersPause is the pause before each cycle of BenchmarkLayers/sporadic.
const layersPause = 10 * time.Millisecond

// BenchmarkLayers measures where one uncontended acquire and one release
// spend their time, a layer at a time, on one go-redis client and one
// private redis-server:
//
//   - ping: two PINGs, the round trips any lock needs;
//   - floor: the fenced floor's two scripts (SET NX PX and INCR, then a
//     compare-and-delete), the least a lock with fencing tokens can do
//     (BenchmarkAcquireRelease/fenced-floor, bench/peers' fenced-floor);
//   - backend: fencelock's Redis backend called directly (its scripts, key
//     names, arguments and replies);
//   - client: Client.Acquire and Lock.Release, what users call.
//
// It runs twice: on a client with ContextTimeoutEnabled, and on a client
// with go-redis's default options, where the backend hands each request to
// a goroutine of its own (see the package documentation); each layer also
// reports the process's CPU per cycle ("client-cpu-µs", ...). A third run,
// "sporadic", pauses layersPause before each cycle, as a service that
// locks now and then does: the CPUs idle in between (on this project's VM
// Redis then spends several times as long on each script call as back to
// back), so every layer runs cold, and the layers take turns a cycle at a
// time. That run needs a count of cycles (-benchtime 2000x: 20 s).
//
// Every step gets a fresh request context (context.WithTimeout, 10 s), as
// in an HTTP handler. The layers take turns in blocks of layersBlock
// cycles, so the machine's drift (large on a shared VM) falls on all of
// them alike, and the benchmark reports the median of each step in µs
// ("client-acquire-µs", ...): the difference between two layers is what
// the upper one adds. ns/op is the mean cycle of the four layers. No time
// is asserted; take a few runs (-count 3), e.g.
//
//	go test -run '^$' -bench Layers -benchtime 20000x -count 3 ./redisbackend
func BenchmarkLayers(b *testing.B) {
	srv := servertest.Redis(b)
	b.Run("ContextTimeoutEnabled", func(b *testing.B) { benchmarkLayers(b, srv.Addr(), true, 0) })
	b.Run("default-client", func(b *testing.B) { benchmarkLayers(b, srv.Addr(), false, 0) })
	b.Run("sporadic", func(b *testing.B) { benchmarkLayers(b, srv.Addr(), true, layersPause) })
}

// benchmarkLayers runs the layers on a go-redis client with or without
// ContextTimeoutEnabled, each cycle after pause (none: back to back).
func benchmarkLayers(b *testing.B, addr string, contextTimeouts bool, pause time.Duration) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 256, ContextTimeoutEnabled: contextTimeouts})
	backend := redisbackend.New(rdb)
	client := fencelock.New(backend)
	b.Cleanup(func() {
		client.Close()
		rdb.Close()
	})

	// step runs one step of a layer under a fresh request context and
	// returns how long it took.
	step := func(f func(ctx context.Context) error) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := f(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	n := 0
	newToken := func() string {
		n++
		return "token-" + strconv.Itoa(n)
	}
	type layer struct {
		name               string
		cycle              func() (acquire, release time.Duration)
		acquires, releases []time.Duration
		cpu                time.Duration
	}
	layers := []*layer{
		{name: "ping", cycle: func() (time.Duration, time.Duration) {
			ping := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
			return step(ping), step(ping)
		}},
		{name: "floor", cycle: func() (time.Duration, time.Duration) {
			token := newToken()
			acquire := step(func(ctx context.Context) error {
				return floorAcquireScript.Run(ctx, rdb, floorKeys, token, benchTTL.Milliseconds()).Err()
			})
			release := step(func(ctx context.Context) error {
				return floorReleaseScript.Run(ctx, rdb, floorKeys[:1], token).Err()
			})
			return acquire, release
		}},
		{name: "backend", cycle: func() (time.Duration, time.Duration) {
			ref := driver.Ref{Key: "backend", Token: newToken()}
			acquire := step(func(ctx context.Context) error {
				_, err := backend.Acquire(ctx, driver.Request{Ref: ref, Owner: ref.Token, TTL: benchTTL})
				return err
			})
			release := step(func(ctx context.Context) error {
				_, err := backend.Release(ctx, driver.ReleaseRequest{Ref: ref})
				return err
			})
			return acquire, release
		}},
		{name: "client", cycle: func() (time.Duration, time.Duration) {
			var lk *fencelock.Lock
			acquire := step(func(ctx context.Context) (err error) {
				lk, err = client.Acquire(ctx, "client", benchTTL)
				return err
			})
			return acquire, step(lk.Release)
		}},
	}
	block := layersBlock
	if pause > 0 {
		block = 1 // cold by design: nothing to warm up
	}
	i := 0
	for b.Loop() {
		if pause > 0 {
			time.Sleep(pause) // the idle time between a service's requests, not a wait for an event
		}
		l := layers[(i/block)%len(layers)]
		cpu := cpuTime()
		acquire, release := l.cycle()
		l.cpu += cpuTime() - cpu
		l.acquires = append(l.acquires, acquire)
		l.releases = append(l.releases, release)
		i++
	}
	median := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	for _, l := range layers {
		b.ReportMetric(median(l.acquires), l.name+"-acquire-µs")
		b.ReportMetric(median(l.releases), l.name+"-release-µs")
		if len(l.acquires) > 0 {
			b.ReportMetric(float64(l.cpu)/float64(len(l.acquires))/float64(time.Microsecond), l.name+"-cpu-µs")
		}
	}
}
