package redisbackend_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
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

// The held-locks workload: one Client holds many locks with
// automatic renewal, against a private redis-server. Environment:
//
//	FENCELOCK_HELD_LOCKS   how many locks (default 10000)
//	FENCELOCK_HELD_TTL     their lease (default 6s; 30s for 100,000 locks, 60s at 1,000,000)
//	FENCELOCK_HELD_RENEW   the renewal interval (default a third of the ttl)
//	FENCELOCK_HELD_ROUNDS  how many renewal intervals to observe (default 2)
//	FENCELOCK_HELD_PROBE   how often to time a lock+unlock of another key (default 10ms; 0: never,
//	                       to see the CPU time of renewal alone)
//	FENCELOCK_HELD_CPUPROFILE  a file to write a CPU profile of the observed window to
//
// For example, at 100,000 and at 1,000,000 locks:
//
//	FENCELOCK_HELD_LOCKS=100000 FENCELOCK_HELD_TTL=30s go test -run '^$' -bench HeldLocks -benchtime 1x ./redisbackend/
//	FENCELOCK_HELD_LOCKS=1000000 FENCELOCK_HELD_TTL=60s go test -run '^$' -bench HeldLocks -benchtime 1x -timeout 30m ./redisbackend/
const (
	envHeldLocks  = "FENCELOCK_HELD_LOCKS"
	envHeldTTL    = "FENCELOCK_HELD_TTL"
	envHeldRenew  = "FENCELOCK_HELD_RENEW"
	envHeldRounds = "FENCELOCK_HELD_ROUNDS"
	envHeldProbe  = "FENCELOCK_HELD_PROBE"
	envHeldProf   = "FENCELOCK_HELD_CPUPROFILE"
)

// heldConfig is the workload, from the environment.
type heldConfig struct {
	locks      int
	ttl, renew time.Duration
	rounds     int
	probe      time.Duration // 0: no probe
}

func heldConfigFromEnv(b *testing.B) heldConfig {
	cfg := heldConfig{locks: 10_000, ttl: 6 * time.Second, rounds: 2, probe: 10 * time.Millisecond}
	if s := os.Getenv(envHeldLocks); s != "" {
		n, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number", envHeldLocks, s)
		}
		cfg.locks = n
	}
	duration := func(name string, d *time.Duration) {
		if s := os.Getenv(name); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v <= 0 {
				b.Fatalf("%s=%q: want a positive duration", name, s)
			}
			*d = v
		}
	}
	duration(envHeldTTL, &cfg.ttl)
	cfg.renew = cfg.ttl / 3
	duration(envHeldRenew, &cfg.renew)
	if s := os.Getenv(envHeldProbe); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 {
			b.Fatalf("%s=%q: want a duration, 0 for no probe", envHeldProbe, s)
		}
		cfg.probe = v
	}
	if s := os.Getenv(envHeldRounds); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number", envHeldRounds, s)
		}
		cfg.rounds = n
	}
	return cfg
}

// heldRenewCounter is a Backend that counts the renewal calls the Client makes
// and how many of them are in flight at once.
type heldRenewCounter struct {
	*redisbackend.Backend
	calls, renewals atomic.Int64
	inflight        atomic.Int64
	maxInflight     atomic.Int64
	maxBatch        atomic.Int64
	lastActive      atomic.Int64 // UnixNano of the last start or end of a Renew call
}

func (r *heldRenewCounter) Renew(ctx context.Context, reqs []driver.RenewRequest) ([]driver.RenewResult, error) {
	r.calls.Add(1)
	r.renewals.Add(int64(len(reqs)))
	heldRaise(&r.maxBatch, int64(len(reqs)))
	heldRaise(&r.maxInflight, r.inflight.Add(1))
	r.lastActive.Store(time.Now().UnixNano())
	defer func() {
		r.lastActive.Store(time.Now().UnixNano())
		r.inflight.Add(-1)
	}()
	return r.Backend.Renew(ctx, reqs)
}

// renewing reports whether a Renew call is in flight or was within the
// last 100ms.
func (r *heldRenewCounter) renewing() bool {
	return r.inflight.Load() > 0 || time.Now().UnixNano()-r.lastActive.Load() < int64(100*time.Millisecond)
}

func heldRaise(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// BenchmarkHeldLocks takes FENCELOCK_HELD_LOCKS locks with automatic
// renewal on one Client, then observes FENCELOCK_HELD_ROUNDS renewal
// intervals, during which every lock is renewed that many times. It reports
// (no asserted times; run it with -benchtime 1x):
//
//   - cpu-%core: the process's CPU time (user+system, getrusage) over the
//     window, in percent of one core; busiest-s-%core: the busiest second;
//   - probe-p50/p99/max-ms: a lock+unlock (Acquire, Release, with a request
//     context) of another key, every 10ms throughout the window (its own
//     CPU time is in cpu-%core: compare with FENCELOCK_HELD_LOCKS=1, or
//     turn it off with FENCELOCK_HELD_PROBE=0); sweep-probe-p99/max-ms: the
//     sweep-probes of them made while a renewal call was in flight (or
//     within 100ms of one);
//   - goroutines: the most seen during the window, less those the process
//     had before the Client was made and the benchmark's own two;
//   - lost: locks that were lost by the end of the window (must be 0);
//   - renewals/lock: renewal requests in the window per lock (about
//     FENCELOCK_HELD_ROUNDS), max-batch and max-inflight: the largest Renew
//     call and the most Renew calls in flight at once;
//   - B/lock: live heap and goroutine stacks per held lock, after a GC;
//     redis-B/lock: the server's used_memory per held lock;
//     redis-µs/script: the server's time per script call in the window
//     (INFO commandstats), nearly all of them renewals.
func BenchmarkHeldLocks(b *testing.B) {
	cfg := heldConfigFromEnv(b)
	srv := servertest.Redis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64, ContextTimeoutEnabled: true})
	b.Cleanup(func() { rdb.Close() })
	bg := context.Background()
	if err := rdb.Ping(bg).Err(); err != nil {
		b.Fatal(err)
	}
	redisBase := heldRedisMemory(b, rdb)

	locks := make([]*fencelock.Lock, cfg.locks)
	goroutinesBefore := runtime.NumGoroutine()
	memBefore := heldHeapAndStacks()
	backend := &heldRenewCounter{Backend: redisbackend.New(rdb)}
	c := fencelock.New(backend)
	b.Cleanup(func() { c.Close() })

	// Take the locks, 64 at a time.
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errMu   sync.Mutex
		errs    int
		lastErr error
	)
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.locks {
					return
				}
				ctx, cancel := context.WithTimeout(bg, 10*time.Second)
				lk, err := c.Acquire(ctx, fmt.Sprintf("held:%d", i), cfg.ttl, fencelock.WithAutoRenew(cfg.renew))
				cancel()
				if err != nil {
					errMu.Lock()
					errs, lastErr = errs+1, err
					errMu.Unlock()
					continue
				}
				locks[i] = lk
			}
		})
	}
	wg.Wait()
	acquired := time.Since(start)
	if errs > 0 {
		b.Fatalf("%d of %d acquisitions failed, the last with: %v", errs, cfg.locks, lastErr)
	}
	bytesPerLock := float64(heldHeapAndStacks()-memBefore) / float64(cfg.locks)
	redisPerLock := float64(heldRedisMemory(b, rdb)-redisBase) / float64(cfg.locks)
	b.Logf("%d locks taken in %v (%.0f/s); ttl %v, renewed every %v; observing %d rounds",
		cfg.locks, acquired.Round(time.Millisecond), float64(cfg.locks)/acquired.Seconds(), cfg.ttl, cfg.renew, cfg.rounds)

	// The window: a probe on another key every 10ms, and a sampler of CPU
	// time and goroutines every second.
	var (
		done        = make(chan struct{})
		probes      []time.Duration
		sweepProbes []time.Duration // those made while renewals were in flight
		slowest     []heldProbe     // the slowest probes, for the log
		probeErrs   int
		busiest     float64
		maxRoutines int
		timeline    []string
		obs         sync.WaitGroup
	)
	obs.Go(func() {
		if cfg.probe == 0 {
			<-done
			return
		}
		tick := time.NewTicker(cfg.probe)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			sweep := backend.renewing()
			t0 := time.Now()
			lk, err := c.Acquire(ctx, "held-probe", cfg.ttl)
			if err == nil {
				err = lk.Release(ctx)
			}
			d := time.Since(t0)
			cancel()
			if err != nil {
				probeErrs++
				continue
			}
			probes = append(probes, d)
			slowest = heldKeepSlowest(slowest, heldProbe{at: t0, took: d}, 5)
			if sweep || backend.renewing() {
				sweepProbes = append(sweepProbes, d)
			}
		}
	})
	obs.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, lastAt, lastRenewals := heldCPU(), time.Now(), backend.renewals.Load()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				cpu, renewals := heldCPU(), backend.renewals.Load()
				share := float64(cpu-last) / float64(now.Sub(lastAt))
				busiest = max(busiest, share)
				maxRoutines = max(maxRoutines, runtime.NumGoroutine())
				timeline = append(timeline, fmt.Sprintf("%.0f%%/%d", 100*share, renewals-lastRenewals))
				last, lastAt, lastRenewals = cpu, now, renewals
			}
		}
	})
	if err := rdb.ConfigResetStat(bg).Err(); err != nil {
		b.Fatal(err)
	}
	renewalsBefore, callsBefore := backend.renewals.Load(), backend.calls.Load()
	if path := os.Getenv(envHeldProf); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	cpu0, t0 := heldCPU(), time.Now()
	time.Sleep(time.Duration(cfg.rounds) * cfg.renew)
	cpu, window := heldCPU()-cpu0, time.Since(t0)
	pprof.StopCPUProfile()
	close(done)
	obs.Wait()
	renewals, calls := backend.renewals.Load()-renewalsBefore, backend.calls.Load()-callsBefore
	scriptMicros := heldScriptMicros(b, rdb)

	lost := 0
	var lostErr error
	for _, lk := range locks {
		if err := lk.Err(); err != nil {
			lost++
			lostErr = err
		}
	}
	if lost > 0 {
		b.Logf("%d locks lost, e.g.: %v", lost, lostErr)
	}
	b.Logf("per second (client CPU / renewals): %s", strings.Join(timeline, " "))
	if probeErrs > 0 {
		b.Logf("%d probes failed", probeErrs)
	}

	for _, p := range slowest {
		b.Logf("slow probe: %v at %v into the window (%v after the process started, as in GODEBUG=gctrace=1)",
			p.took.Round(time.Microsecond), p.at.Sub(t0).Round(time.Millisecond), p.at.Sub(heldProcessStart).Round(time.Millisecond))
	}
	slices.Sort(probes)
	b.ReportMetric(100*float64(cpu)/float64(window), "cpu-%core")
	b.ReportMetric(100*busiest, "busiest-s-%core")
	b.ReportMetric(heldMillis(heldPercentile(probes, 0.50)), "probe-p50-ms")
	b.ReportMetric(heldMillis(heldPercentile(probes, 0.99)), "probe-p99-ms")
	if len(probes) > 0 {
		b.ReportMetric(heldMillis(probes[len(probes)-1]), "probe-max-ms")
	}
	slices.Sort(sweepProbes)
	b.ReportMetric(heldMillis(heldPercentile(sweepProbes, 0.99)), "sweep-probe-p99-ms")
	if len(sweepProbes) > 0 {
		b.ReportMetric(heldMillis(sweepProbes[len(sweepProbes)-1]), "sweep-probe-max-ms")
	}
	b.ReportMetric(float64(len(sweepProbes)), "sweep-probes")
	b.ReportMetric(float64(maxRoutines-goroutinesBefore-2), "goroutines")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(renewals)/float64(cfg.locks), "renewals/lock")
	b.ReportMetric(float64(renewals)/float64(max(calls, 1)), "renewals/call")
	b.ReportMetric(float64(backend.maxBatch.Load()), "max-batch")
	b.ReportMetric(float64(backend.maxInflight.Load()), "max-inflight")
	b.ReportMetric(scriptMicros, "redis-µs/script")
	b.ReportMetric(bytesPerLock, "B/lock")
	b.ReportMetric(redisPerLock, "redis-B/lock")

	// Release them, 64 at a time, as an application shutting down would,
	// so that Close has nothing left to release.
	next.Store(0)
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.locks {
					return
				}
				ctx, cancel := context.WithTimeout(bg, 10*time.Second)
				err := locks[i].Release(ctx)
				cancel()
				if err != nil && !errors.Is(err, fencelock.ErrNotHeld) {
					b.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// heldCPU returns the CPU time (user and system) the process has used.
func heldCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heldHeapAndStacks returns the live heap and goroutine stacks after a GC.
func heldHeapAndStacks() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// heldRedisMemory returns the server's used_memory (INFO memory).
func heldRedisMemory(b *testing.B, rdb *redis.Client) uint64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no used_memory in INFO memory: %q", info)
	return 0
}

// heldProcessStart is about when the process started.
var heldProcessStart = time.Now()

// heldProbe is one timed lock+unlock.
type heldProbe struct {
	at   time.Time
	took time.Duration
}

// heldKeepSlowest adds p to slowest, keeping the n slowest, slowest first.
func heldKeepSlowest(slowest []heldProbe, p heldProbe, n int) []heldProbe {
	i, _ := slices.BinarySearchFunc(slowest, p, func(a, b heldProbe) int { return cmp.Compare(b.took, a.took) })
	if i >= n {
		return slowest
	}
	slowest = slices.Insert(slowest, i, p)
	return slowest[:min(len(slowest), n)]
}

// heldScriptMicros returns the server's mean time per EVALSHA since its
// statistics were reset (INFO commandstats): in the window, nearly all of
// them are renewals.
func heldScriptMicros(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
		}
	}
	return 0
}

// heldPercentile returns the p-quantile (0..1) of sorted, nearest rank.
func heldPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func heldMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
