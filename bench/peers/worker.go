package main

// The worker side: every measurement runs in a child process (this binary,
// re-executed with $PEERS_WORKER set to the job), so that each library's
// figures come from a process of its own (CPU time from getrusage, heap,
// goroutines), and the cross-process workload runs in real, separate
// processes. The protocol on the child's stdin/stdout, one line each:
//
//	child → "ready"           connected and warmed up
//	parent → "go"             start the measured part now
//	child → {workerResult}    finished (JSON)
//	parent closes stdin       the child exits

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// workerEnv holds the job of a worker process.
const workerEnv = "PEERS_WORKER"

// Job kinds.
const (
	kindPing   = "ping"   // one goroutine sends PING back to back
	kindCycles = "cycles" // workers take, hold and release locks
	kindHeld   = "held"   // hold many locks with renewal, probe another key
)

// job is what one worker process does.
type job struct {
	Kind    string        `json:"kind"`
	Library string        `json:"library"`
	Addr    string        `json:"addr"`
	Prefix  string        `json:"prefix"` // key prefix, unique per job
	Proc    int           `json:"proc"`   // index among the job's processes
	Warmup  time.Duration `json:"warmup"`
	// Request bounds every acquire: a fresh context.WithTimeout(Request)
	// per acquire+release, as an HTTP handler gets.
	Request time.Duration `json:"request"`
	TTL     time.Duration `json:"ttl"`

	// cycles, ping
	Duration time.Duration `json:"duration"`
	Workers  int           `json:"workers"`
	Shared   bool          `json:"shared"`  // all workers (of all processes) on one key
	Hold     time.Duration `json:"hold"`    // inside the critical section
	Think    time.Duration `json:"think"`   // after a release, before the next acquire
	Shm      string        `json:"shm"`     // file of the shared critical-section counter
	Profile  string        `json:"profile"` // write a CPU profile of the measured part here

	// held
	Held       int           `json:"held"`
	Renew      time.Duration `json:"renew"`
	Window     time.Duration `json:"window"`
	ProbeEvery time.Duration `json:"probe_every"`
}

// workerResult is what a worker process reports.
type workerResult struct {
	Ops        int64   `json:"ops"`       // acquisitions, the tail's included
	InWindow   int64   `json:"in_window"` // acquisitions made before the stop
	WindowNs   int64   `json:"window_ns"` // from the start to the stop
	ElapsedNs  int64   `json:"elapsed_ns"`
	PerWorker  []int64 `json:"per_worker"`
	WaitsNs    []int64 `json:"waits_ns"` // from asking to holding, or to giving up
	CPUNs      int64   `json:"cpu_ns"`   // this process, user + system, over the measured part
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`

	Held *heldResult `json:"held,omitempty"`
}

// heldResult is the outcome of a held-locks job.
type heldResult struct {
	Locks        int     `json:"locks"`          // held at the start of the window
	AcquireNs    int64   `json:"acquire_ns"`     // taking them all (64 goroutines)
	WindowNs     int64   `json:"window_ns"`      // the observed window
	CPUNs        int64   `json:"cpu_ns"`         // this process, over the window
	BusiestCPU   float64 `json:"busiest_cpu"`    // the busiest second of the window, in cores
	ProbesNs     []int64 `json:"probes_ns"`      // lock+unlock of another key, during the window (failed ones too)
	Goroutines   int     `json:"goroutines"`     // runtime.NumGoroutine near the end of the window
	BytesPerLock float64 `json:"bytes_per_lock"` // heap + stacks after GC, per held lock
	Lost         int     `json:"lost"`           // locks found lost at the end of the window
	RenewErrors  int64   `json:"renew_errors"`   // failed renewals by the benchmark's renewal goroutines
}

// isWorker reports whether this process was started as a worker.
func isWorker() bool { return os.Getenv(workerEnv) != "" }

// workerMain runs the job in $PEERS_WORKER and exits.
func workerMain() {
	var j job
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &j); err != nil {
		fmt.Fprintln(os.Stderr, "peers worker: bad job:", err)
		os.Exit(2)
	}
	if err := work(j, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "peers worker %s %s #%d: %v\n", j.Library, j.Kind, j.Proc, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// work runs j: connect, warm up, say ready, wait for go, measure, report.
func work(j job, in *os.File, out *os.File) error {
	lines := bufio.NewScanner(in)
	waitGo := func() error {
		fmt.Fprintln(out, "ready")
		if !lines.Scan() || lines.Text() != "go" {
			return errors.New("no go from the parent")
		}
		return nil
	}
	var res workerResult
	switch j.Kind {
	case kindPing:
		rdb := redis.NewClient(&redis.Options{Addr: j.Addr, PoolSize: 1})
		defer rdb.Close()
		pingFor(rdb, j.Warmup)
		if err := waitGo(); err != nil {
			return err
		}
		res = pingFor(rdb, j.Duration)
	case kindCycles, kindHeld:
		lib, ok := libraryByName(j.Library)
		if !ok {
			return fmt.Errorf("unknown library %q", j.Library)
		}
		l, err := lib.connect(j.Addr, j.TTL, j.Renew)
		if err != nil {
			return err
		}
		// Warm up on keys of our own: dial connections, load scripts.
		warm := j
		warm.Prefix, warm.Shared, warm.Shm, warm.Duration = fmt.Sprintf("%s:warm%d", j.Prefix, j.Proc), false, "", j.Warmup
		warm.Workers, warm.Hold, warm.Think = max(j.Workers, 8), 0, 0
		if j.Warmup > 0 {
			cycles(l, warm)
		}
		if err := waitGo(); err != nil {
			return err
		}
		stopProfile, err := startProfile(j)
		if err != nil {
			return err
		}
		if j.Kind == kindCycles {
			res = cycles(l, j)
		} else {
			res = held(l, j)
		}
		stopProfile()
		if err := json.NewEncoder(out).Encode(res); err != nil {
			return err
		}
		lines.Scan() // until the parent closes stdin
		if j.Kind == kindHeld {
			// Releasing 100,000 locks one by one would only slow the run
			// down; the parent flushes the server after every job.
			return nil
		}
		closed := make(chan error, 1)
		go func() { closed <- l.close() }()
		select {
		case err := <-closed:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("close took more than 10s")
		}
	default:
		return fmt.Errorf("unknown job kind %q", j.Kind)
	}
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return err
	}
	lines.Scan()
	return nil
}

// pingFor sends PING back to back for d, from one goroutine.
func pingFor(rdb *redis.Client, d time.Duration) workerResult {
	var res workerResult
	cpu0, start := processCPU(), time.Now()
	for time.Since(start) < d {
		t0 := time.Now()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			res.Errors++
			res.FirstError = err.Error()
			continue
		}
		res.WaitsNs = append(res.WaitsNs, int64(time.Since(t0)))
	}
	res.ElapsedNs = int64(time.Since(start))
	res.WindowNs = res.ElapsedNs
	res.CPUNs = int64(processCPU() - cpu0)
	res.Ops = int64(len(res.WaitsNs))
	res.InWindow = res.Ops
	res.PerWorker = []int64{res.Ops}
	return res
}

// errorCount counts errors and keeps the first one's text.
type errorCount struct {
	n     atomic.Int64
	mu    sync.Mutex
	first string
}

func (e *errorCount) add(err error) {
	if e.n.Add(1) == 1 {
		e.mu.Lock()
		e.first = err.Error()
		e.mu.Unlock()
	}
}

func (e *errorCount) get() (int64, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n.Load(), e.first
}

// cycles runs j.Workers goroutines for j.Duration, each taking its own key
// (or, with j.Shared, the one key of all processes), holding it for j.Hold
// and pausing j.Think after the release. After j.Duration (the stop) no
// worker asks again, but an acquire in progress runs to its end, so that a
// starved worker's long wait is not cut off: its wait counts, and so does
// its acquisition per worker, but the throughput counts only acquisitions
// made before the stop, over j.Duration (a worker stuck in the tail must
// not stretch the time of the others, who stopped). A failed acquire counts
// as an error, and its time (until it gave up) as a wait. With j.Shm, the workers count, in memory shared by all processes of
// the job, who is inside the critical section, and the parent reports a
// violation whenever a worker finds another one there.
func cycles(l locker, j job) workerResult {
	var (
		stop      atomic.Bool
		errs      errorCount
		perWorker = make([]int64, j.Workers)
		inWindow  = make([]int64, j.Workers)
		waits     = make([][]int64, j.Workers)
		wg        sync.WaitGroup
	)
	var sec *sharedSection
	if j.Shm != "" {
		var err error
		if sec, err = openSection(j.Shm); err != nil {
			errs.add(err)
		} else {
			defer sec.close()
		}
	}
	cpu0, start := processCPU(), time.Now()
	timer := time.AfterFunc(j.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	for i := range j.Workers {
		key := fmt.Sprintf("%s:%d:%d", j.Prefix, j.Proc, i)
		if j.Shared {
			key = j.Prefix
		}
		wg.Go(func() {
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), j.Request)
				t0 := time.Now()
				got := false
				err := l.cycle(ctx, key, func() {
					waits[i] = append(waits[i], int64(time.Since(t0)))
					got = true
					if !stop.Load() {
						inWindow[i]++
					}
					sec.enter()
					if j.Hold > 0 {
						time.Sleep(j.Hold)
					}
					sec.exit()
				})
				cancel()
				if got {
					perWorker[i]++
				}
				if err != nil {
					errs.add(err)
					if !got {
						waits[i] = append(waits[i], int64(time.Since(t0)))
					}
				}
				if j.Think > 0 {
					time.Sleep(j.Think)
				} else if err != nil && !got {
					time.Sleep(time.Millisecond) // do not spin on a failing server
				}
			}
		})
	}
	wg.Wait()
	res := workerResult{
		ElapsedNs: int64(time.Since(start)),
		WindowNs:  int64(j.Duration),
		CPUNs:     int64(processCPU() - cpu0),
		PerWorker: perWorker,
		WaitsNs:   slices.Concat(waits...),
	}
	for i := range perWorker {
		res.Ops += perWorker[i]
		res.InWindow += inWindow[i]
	}
	res.Errors, res.FirstError = errs.get()
	return res
}

// held takes j.Held locks with renewal (64 goroutines), then for j.Window
// measures this process's CPU time and, every j.ProbeEvery, the latency of
// a lock+unlock of another key; at the end it counts goroutines and lost
// locks. The locks are not released: the process exits and the parent
// flushes the server.
func held(l locker, j job) workerResult {
	var (
		errs  errorCount
		locks = make([]heldLock, j.Held)
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	base := heapAndStacks()
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= j.Held {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), j.Request)
				lk, err := l.hold(ctx, fmt.Sprintf("%s:%d", j.Prefix, i), j.TTL, j.Renew)
				cancel()
				if err != nil {
					errs.add(err)
					continue
				}
				locks[i] = lk
			}
		})
	}
	wg.Wait()
	h := &heldResult{AcquireNs: int64(time.Since(start))}
	for _, lk := range locks {
		if lk != nil {
			h.Locks++
		}
	}
	if h.Locks > 0 {
		h.BytesPerLock = float64(heapAndStacks()-base) / float64(h.Locks)
	}

	// The window: a probe on another key, and CPU time per second.
	done := make(chan struct{})
	var probeWG sync.WaitGroup
	probeWG.Go(func() {
		t := time.NewTicker(j.ProbeEvery)
		defer t.Stop()
		key := j.Prefix + ":probe"
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), j.Request)
			t0 := time.Now()
			err := l.cycle(ctx, key, func() {})
			cancel()
			// A failed probe counts with the time it took: a user's
			// request would have waited that long too.
			h.ProbesNs = append(h.ProbesNs, int64(time.Since(t0)))
			if err != nil {
				errs.add(fmt.Errorf("probe: %w", err))
			}
		}
	})
	probeWG.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, lastAt := processCPU(), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				c := processCPU()
				h.BusiestCPU = max(h.BusiestCPU, float64(c-last)/float64(now.Sub(lastAt)))
				last, lastAt = c, now
			}
		}
	})
	cpu0, w0 := processCPU(), time.Now()
	time.Sleep(j.Window)
	h.Goroutines = runtime.NumGoroutine() // all, the benchmark's 3 (main, probe, sampler) included
	close(done)
	probeWG.Wait()
	h.CPUNs, h.WindowNs = int64(processCPU()-cpu0), int64(time.Since(w0))
	for _, lk := range locks {
		if lk != nil && lk.lost() {
			h.Lost++
		}
		if lk != nil {
			h.RenewErrors += lk.renewErrors()
		}
	}
	res := workerResult{Held: h, ElapsedNs: h.WindowNs, WindowNs: h.WindowNs, CPUNs: h.CPUNs,
		Ops: int64(len(h.ProbesNs)), InWindow: int64(len(h.ProbesNs))}
	res.Errors, res.FirstError = errs.get()
	return res
}

// startProfile starts a CPU profile of the measured part if j asks for
// one, and returns what stops it.
func startProfile(j job) (stop func(), err error) {
	if j.Profile == "" {
		return func() {}, nil
	}
	f, err := os.Create(j.Profile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// heapAndStacks returns the live heap and goroutine stacks after a GC.
func heapAndStacks() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// processCPU returns the CPU time this process has used (user + system, all
// threads), from getrusage.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
