package redisbackend_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/go-redis/v9"
)

// benchTTL is the lease of every benchmark lock: long enough that expiry
// never decides anything.
const benchTTL = 10 * time.Second

// benchClient starts a private redis-server and returns a fencelock Client
// on it (go-redis pool of 256 connections, ContextTimeoutEnabled as the
// README recommends), all closed at cleanup.
func benchClient(b *testing.B) *fencelock.Client {
	c, _ := benchClientWith(b, &redis.Options{PoolSize: 256, ContextTimeoutEnabled: true})
	return c
}

// benchClientWith is benchClient with the given go-redis options (Addr is
// set to the private server's); it also returns the go-redis client.
func benchClientWith(b *testing.B, opt *redis.Options) (*fencelock.Client, *redis.Client) {
	b.Helper()
	srv := servertest.Redis(b)
	opt.Addr = srv.Addr()
	rdb := redis.NewClient(opt)
	c := fencelock.New(redisbackend.New(rdb))
	b.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	return c, rdb
}

// commandsProcessed returns the number of commands the server has run
// (commands inside scripts count, each script call counts once more).
func commandsProcessed(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no total_commands_processed in INFO stats")
	return 0
}

// The fenced floor's scripts (BenchmarkAcquireRelease/fenced-floor,
// BenchmarkLayers): the least a lock that mints a fencing token in the same
// step as the acquire can run, on the lock and counter keys floorKeys.
var (
	floorAcquireScript = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return 0`)
	floorReleaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	floorKeys          = []string{"{floor}:lock", "{floor}:fence"}
)

// benchCycle takes the uncontended lock key once and releases it.
func benchCycle(ctx context.Context, c *fencelock.Client, key string) error {
	lk, err := c.TryAcquire(ctx, key, benchTTL)
	if err != nil {
		return err
	}
	return lk.Release(ctx)
}

// reportOpsPerSec reports b.N over the timed part of the benchmark.
func reportOpsPerSec(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "ops/s")
	}
}

// cpuTime returns the CPU time (user and system) the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the client's CPU time per operation since start (the
// process's, so the redis-server's own work is not counted). Unlike ns/op,
// it hardly depends on what else the machine is running.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e3, "cpu-µs/op")
	}
}

// BenchmarkAcquireRelease measures uncontended TryAcquire + Release cycles:
// each goroutine uses its own key, so every attempt succeeds and the figure
// is the cost of two scripts and the client's bookkeeping.
func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		c := benchClient(b)
		ctx := context.Background()
		cpu := cpuTime()
		for b.Loop() {
			if err := benchCycle(ctx, c, "serial"); err != nil {
				b.Fatal(err)
			}
		}
		reportOpsPerSec(b)
		reportCPU(b, cpu)
	})

	// What an HTTP handler does: Acquire (waiting allowed) under the
	// request's context, which has a deadline. "default-options" is the
	// same with go-redis's defaults: without ContextTimeoutEnabled, each
	// request runs on a goroutine of its own while the caller watches the
	// context.
	serialRequest := func(b *testing.B, c *fencelock.Client, rdb *redis.Client) {
		commands := commandsProcessed(b, rdb)
		cpu := cpuTime()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			lk, err := c.Acquire(ctx, "serial-request", benchTTL)
			if err == nil {
				err = lk.Release(ctx)
			}
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		reportOpsPerSec(b)
		reportCPU(b, cpu)
		// Less the INFO call itself.
		b.ReportMetric(float64(commandsProcessed(b, rdb)-commands-1)/float64(b.N), "redis-cmds/op")
	}
	b.Run("serial-request", func(b *testing.B) {
		c, rdb := benchClientWith(b, &redis.Options{PoolSize: 256, ContextTimeoutEnabled: true})
		serialRequest(b, c, rdb)
	})
	b.Run("serial-request-default-options", func(b *testing.B) {
		c, rdb := benchClientWith(b, &redis.Options{PoolSize: 256})
		serialRequest(b, c, rdb)
	})

	// The bound: two PINGs through the same go-redis client, the least any
	// lock on go-redis can do per cycle (one request to take, one to give
	// back). Ratio serial-request against it.
	b.Run("ping2-bound", func(b *testing.B) {
		srv := servertest.Redis(b)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 256, ContextTimeoutEnabled: true})
		b.Cleanup(func() { rdb.Close() })
		cpu := cpuTime()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := rdb.Ping(ctx).Err()
			if err == nil {
				err = rdb.Ping(ctx).Err()
			}
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		reportOpsPerSec(b)
		reportCPU(b, cpu)
	})

	// The floor of fenced locks: what any lock that mints a fencing token
	// in the same step as the acquire must at least do on go-redis (no
	// single command takes a key and returns a counter): a script running
	// SET NX PX and INCR, and a compare-and-delete script to release;
	// nothing else (no tombstones, clock floor, re-entrancy, holder
	// identity or notifications). bench/peers runs the same yardstick
	// ("fenced-floor") beside the peers. Ratio serial-request against it:
	// what fencelock's other guarantees and its Client cost.
	b.Run("fenced-floor", func(b *testing.B) {
		srv := servertest.Redis(b)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 256, ContextTimeoutEnabled: true})
		b.Cleanup(func() { rdb.Close() })
		acquire, release, keys := floorAcquireScript, floorReleaseScript, floorKeys
		cpu := cpuTime()
		n := 0
		for b.Loop() {
			n++
			token := strconv.Itoa(n)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			fence, err := acquire.Run(ctx, rdb, keys, token, benchTTL.Milliseconds()).Int64()
			if err == nil && fence == 0 {
				err = fmt.Errorf("fenced-floor: key %s not free", keys[0])
			}
			if err == nil {
				err = release.Run(ctx, rdb, keys[:1], token).Err()
			}
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		reportOpsPerSec(b)
		reportCPU(b, cpu)
	})

	b.Run("parallel64", func(b *testing.B) {
		c := benchClient(b)
		ctx := context.Background()
		// RunParallel starts parallelism × GOMAXPROCS goroutines.
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((64 + procs - 1) / procs)
		var ids atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("parallel-%d", ids.Add(1))
			for pb.Next() {
				if err := benchCycle(ctx, c, key); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportOpsPerSec(b)
	})
}

// BenchmarkReplicaAck measures what WithReplicaAck costs on the uncontended
// path: a master with one replica, cycles with and without WAIT 1 after the
// acquire (the release needs no acknowledgement). Ratio the two sub-results.
func BenchmarkReplicaAck(b *testing.B) {
	master := servertest.Redis(b)
	servertest.Redis(b, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port()))
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	pollUntil(b, 30*time.Second, "the replica in sync", func() bool {
		n, err := rdb.Wait(ctx, 1, 100*time.Millisecond).Result()
		return err == nil && n == 1
	})
	for _, bc := range []struct {
		name string
		opts []redisbackend.Option
	}{
		{"off", nil},
		{"wait1", []redisbackend.Option{redisbackend.WithReplicaAck(1, time.Second)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := fencelock.New(redisbackend.New(rdb, bc.opts...))
			b.Cleanup(func() { c.Close() })
			for b.Loop() {
				if err := benchCycle(ctx, c, "ack-"+bc.name); err != nil {
					b.Fatal(err)
				}
			}
			reportOpsPerSec(b)
		})
	}
}

// Contended workload: contendedWorkers goroutines take one key in turn,
// each holding it for contendedHold and pausing contendedPause before
// asking again.
const (
	contendedWorkers = 16
	contendedHold    = time.Millisecond
	contendedPause   = time.Millisecond
)

// BenchmarkContended measures a lock handed over between waiting
// goroutines. b.N is the total number of acquisitions, shared by the
// workers. Besides ns/op it reports cycles/s, the time spent in Acquire
// (p50, p99) and the fewest and most acquisitions one worker made (a low
// minimum means starvation). It fails if two workers were ever inside the
// critical section at once. The workers share one Client, like the
// goroutines of one process, so the lock mostly passes through the
// Client's own wait queue; bench/peers --separate-clients measures the
// hand-over between processes.
func BenchmarkContended(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()

	var (
		remaining = int64(b.N)
		left      atomic.Int64 // acquisitions still to make
		inside    atomic.Int32 // workers in the critical section
		overlaps  atomic.Int64 // times a worker found another one inside
		mu        sync.Mutex
		waits     []time.Duration // every Acquire's duration
		perWorker = make([]int, contendedWorkers)
		wg        sync.WaitGroup
	)
	left.Store(remaining)

	b.ResetTimer()
	for w := range contendedWorkers {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				waits = append(waits, mine...)
				mu.Unlock()
			}()
			for left.Add(-1) >= 0 {
				start := time.Now()
				lk, err := c.Acquire(ctx, "contended", benchTTL, fencelock.WithWait(10*time.Second))
				if err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(start))
				perWorker[w]++

				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(contendedHold) // the workload: work inside the lock
				inside.Add(-1)

				if err := lk.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				time.Sleep(contendedPause) // the workload: work between acquisitions
			}
		})
	}
	wg.Wait()
	b.StopTimer()

	if n := overlaps.Load(); n > 0 {
		b.Errorf("mutual exclusion violated %d times", n)
	}
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(len(waits))/s, "cycles/s")
	}
	slices.Sort(waits)
	b.ReportMetric(benchMillis(benchPercentile(waits, 0.50)), "p50-wait-ms")
	b.ReportMetric(benchMillis(benchPercentile(waits, 0.99)), "p99-wait-ms")
	b.ReportMetric(float64(slices.Min(perWorker)), "min-acq/worker")
	b.ReportMetric(float64(slices.Max(perWorker)), "max-acq/worker")
}

// benchPercentile returns the p-quantile (0..1) of sorted, by the nearest-rank
// method; zero for an empty slice.
func benchPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// benchMillis converts d to fractional milliseconds.
func benchMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkRenewBatch measures one renewal batch of 64 held locks through
// the backend (the lease keeper's batch size; one script run on a single
// node), back to back and with the process idle for 1 ms before each
// batch, as in a process holding many locks, whose renewal workers wait
// about a millisecond for Redis between batches. It reports the client's
// CPU per lock ("cpu-µs/lock") and allocations per batch: the difference
// between the two is what waking an idle process costs here, not the
// batch's own work. No time is asserted.
func BenchmarkRenewBatch(b *testing.B) {
	const batch = 64
	_, be := backendWithoutPubSub(b) // renewal needs no notifications
	ctx := context.Background()
	reqs := make([]driver.RenewRequest, batch)
	for i := range reqs {
		ref := driver.Ref{Namespace: fencelock.DefaultNamespace, Key: fmt.Sprintf("renew-%d", i),
			Token: fmt.Sprintf("token-%d-0123456789abcdef", i)}
		if _, err := be.Acquire(ctx, driver.Request{Ref: ref, Owner: ref.Token, TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
		reqs[i] = driver.RenewRequest{Ref: ref, TTL: 30 * time.Second}
	}
	for _, idle := range []time.Duration{0, time.Millisecond} {
		b.Run("idle-"+idle.String(), func(b *testing.B) {
			b.ReportAllocs()
			var cpu time.Duration
			for b.Loop() {
				if idle > 0 {
					time.Sleep(idle)
				}
				start := cpuTime()
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				res, err := be.Renew(rctx, reqs)
				cancel()
				cpu += cpuTime() - start
				if err != nil || !res[0].Held || !res[batch-1].Held {
					b.Fatal(res, err)
				}
			}
			b.ReportMetric(float64(cpu)/float64(b.N)/batch/1e3, "cpu-µs/lock")
		})
	}
}
