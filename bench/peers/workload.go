package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// workload is one of the three measured patterns.
type workload struct {
	name    string
	workers int
	shared  bool          // all workers on one key (else one key each)
	wait    time.Duration // 0: one attempt per acquisition
	hold    time.Duration // time inside the critical section
	pause   time.Duration // time between a release and the next acquire
}

var workloads = []workload{
	{name: "serial", workers: 1},
	{name: "parallel64", workers: parallelWorkers},
	{name: "contended", workers: contendedWorkers, shared: true, wait: maxWait,
		hold: contendedHold, pause: contendedPause},
}

// stats is the outcome of one workload for one library (one round, or the
// median of the rounds).
type stats struct {
	OpsPerSec    float64 `json:"ops_per_sec"` // acquisitions (each released) per second
	Ops          int64   `json:"ops"`
	WaitP50ms    float64 `json:"wait_p50_ms"` // time spent in the acquire call
	WaitP99ms    float64 `json:"wait_p99_ms"`
	WaitMaxms    float64 `json:"wait_max_ms"`
	MinPerWorker int64   `json:"min_acquisitions_per_worker"`
	MaxPerWorker int64   `json:"max_acquisitions_per_worker"`
	PerWorker    []int64 `json:"acquisitions_per_worker,omitempty"` // rounds only, not the median
	ClientCPUus  float64 `json:"client_cpu_us_per_op"`              // this process, all threads
	ServerCPUus  float64 `json:"server_cpu_us_per_op"`              // redis-server, user + sys
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	Violations   int64   `json:"violations"` // times two workers were inside at once
}

// section is the critical section of one key: it counts the workers inside
// and the times a worker found another one there.
type section struct {
	inside     atomic.Int32
	violations atomic.Int64
}

func (s *section) enter() {
	if s.inside.Add(1) > 1 {
		s.violations.Add(1)
	}
}

func (s *section) exit() { s.inside.Add(-1) }

// errorCount counts errors and keeps the first one's text.
type errorCount struct {
	n     atomic.Int64
	once  sync.Once
	first string
}

func (e *errorCount) add(err error) {
	e.n.Add(1)
	e.once.Do(func() { e.first = err.Error() })
}

// run runs w for duration, on keys starting with prefix; worker i uses
// lockers[i % len(lockers)] (one shared client, or one client each). After
// duration no worker asks for the lock again, but an acquire in progress
// runs to its end and counts, so that a starved worker's long wait is not
// cut off; the elapsed time includes that tail. admin reads the server's
// CPU time.
func run(lockers []locker, admin *redis.Client, w workload, prefix string, duration time.Duration) stats {
	var (
		stop      atomic.Bool
		errs      errorCount
		sections  = make([]section, w.workers)
		perWorker = make([]int64, w.workers)
		waits     = make([][]time.Duration, w.workers)
		wg        sync.WaitGroup
	)
	server0, client0 := serverCPU(admin), clientCPU()
	start := time.Now()
	timer := time.AfterFunc(duration, func() { stop.Store(true) })
	defer timer.Stop()

	for i := range w.workers {
		l := lockers[i%len(lockers)]
		key, sec := fmt.Sprintf("%s:%d", prefix, i), &sections[i]
		if w.shared {
			key, sec = prefix, &sections[0]
		}
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Now()
				release, err := l.lock(key, w.wait)
				if err != nil {
					errs.add(err)
					time.Sleep(w.pause)
					continue
				}
				waits[i] = append(waits[i], time.Since(t0))
				perWorker[i]++

				sec.enter()
				if w.hold > 0 {
					time.Sleep(w.hold)
				}
				sec.exit()

				if err := release(); err != nil {
					errs.add(err)
				}
				if w.pause > 0 {
					time.Sleep(w.pause)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	server, client := serverCPU(admin)-server0, clientCPU()-client0

	all := slices.Sorted(slices.Values(slices.Concat(waits...)))
	ops := int64(len(all))
	s := stats{
		OpsPerSec:    float64(ops) / elapsed.Seconds(),
		Ops:          ops,
		WaitP50ms:    millis(percentile(all, 0.50)),
		WaitP99ms:    millis(percentile(all, 0.99)),
		WaitMaxms:    millis(percentile(all, 1)),
		MinPerWorker: slices.Min(perWorker),
		MaxPerWorker: slices.Max(perWorker),
		PerWorker:    perWorker,
		Errors:       errs.n.Load(),
		FirstError:   errs.first,
	}
	if ops > 0 {
		s.ClientCPUus = float64(client.Microseconds()) / float64(ops)
		s.ServerCPUus = float64(server.Microseconds()) / float64(ops)
	}
	for i := range sections {
		s.Violations += sections[i].violations.Load()
	}
	return s
}

// clientCPU returns the CPU time this process has used (user + system).
func clientCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the CPU time redis-server has used (user + system), from
// INFO cpu; zero if it cannot be read.
func serverCPU(admin *redis.Client) time.Duration {
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			v, _ := strconv.ParseFloat(value, 64)
			total += v
		}
	}
	return time.Duration(total * float64(time.Second))
}

// median combines the rounds of one workload: the median of every figure,
// the sum of the counts of errors and violations.
func median(rounds []stats) stats {
	if len(rounds) == 0 {
		return stats{}
	}
	mid := func(f func(stats) float64) float64 {
		vs := make([]float64, len(rounds))
		for i, r := range rounds {
			vs[i] = f(r)
		}
		slices.Sort(vs)
		if n := len(vs); n%2 == 0 {
			return (vs[n/2-1] + vs[n/2]) / 2
		}
		return vs[len(vs)/2]
	}
	m := stats{
		OpsPerSec:    mid(func(s stats) float64 { return s.OpsPerSec }),
		WaitP50ms:    mid(func(s stats) float64 { return s.WaitP50ms }),
		WaitP99ms:    mid(func(s stats) float64 { return s.WaitP99ms }),
		WaitMaxms:    mid(func(s stats) float64 { return s.WaitMaxms }),
		MinPerWorker: int64(mid(func(s stats) float64 { return float64(s.MinPerWorker) })),
		MaxPerWorker: int64(mid(func(s stats) float64 { return float64(s.MaxPerWorker) })),
		ClientCPUus:  mid(func(s stats) float64 { return s.ClientCPUus }),
		ServerCPUus:  mid(func(s stats) float64 { return s.ServerCPUus }),
	}
	for _, r := range rounds {
		m.Ops += r.Ops
		m.Errors += r.Errors
		m.Violations += r.Violations
		if m.FirstError == "" {
			m.FirstError = r.FirstError
		}
	}
	return m
}

// percentile returns the p-quantile (0..1) of sorted by the nearest-rank
// method; zero for an empty slice.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// millis converts d to fractional milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
