package main

import (
	"encoding/json"
	"math"
	"slices"
	"time"
)

// figures are the numbers of one job (one round), or the median of the
// rounds. Times are in milliseconds unless the name says µs; NaN (JSON
// null) where a figure does not apply.
type figures struct {
	OpsPerSec float64 `json:"ops_per_sec"` // acquisitions before the stop ÷ the time to the stop; PING/s for PING
	Ops       float64 `json:"ops"`         // acquisitions, those of the tail after the stop included

	// Time from asking for the lock to holding it, or to giving up (an
	// error); PING: the round trip; held: the probe's lock+unlock.
	WaitP50  float64 `json:"wait_p50_ms"`
	WaitP90  float64 `json:"wait_p90_ms"`
	WaitP99  float64 `json:"wait_p99_ms"`
	WaitP999 float64 `json:"wait_p999_ms"`
	WaitMax  float64 `json:"wait_max_ms"`

	// Acquisitions of the least and most served worker, and their ratio.
	MinPerWorker float64 `json:"min_per_worker"`
	MaxPerWorker float64 `json:"max_per_worker"`
	Fairness     float64 `json:"fairness_min_over_max"`

	ClientCPUus float64 `json:"client_cpu_us_per_op"` // the worker processes, user + system
	ServerCPUus float64 `json:"server_cpu_us_per_op"` // redis-server, user + system
	Commands    float64 `json:"commands_per_op"`      // run by redis-server, scripts' calls included

	// held
	HeldLocks      float64 `json:"held_locks,omitempty"`
	HeldAcquireSec float64 `json:"held_acquire_s,omitempty"`
	HeldCPUPct     float64 `json:"held_cpu_pct,omitempty"`     // average over the window, % of one core
	HeldBusiestPct float64 `json:"held_busiest_pct,omitempty"` // busiest second
	Goroutines     float64 `json:"goroutines,omitempty"`
	BytesPerLock   float64 `json:"bytes_per_lock,omitempty"`
	Lost           float64 `json:"lost,omitempty"`
	RenewErrors    float64 `json:"renew_errors,omitempty"` // the benchmark's renewals (redsync, redislock) that failed

	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	Violations int64  `json:"violations"`
}

// summarize turns the outcome of one job into its figures.
func summarize(o outcome) figures {
	var (
		f       = figures{Errors: 0, Violations: o.violations}
		waits   []int64
		workers []int64
		window  time.Duration
		inWin   float64
		cpu     time.Duration
	)
	for _, w := range o.workers {
		waits = append(waits, w.WaitsNs...)
		workers = append(workers, w.PerWorker...)
		window = max(window, time.Duration(w.WindowNs))
		inWin += float64(w.InWindow)
		cpu += time.Duration(w.CPUNs)
		f.Ops += float64(w.Ops)
		f.Errors += w.Errors
		if f.FirstError == "" {
			f.FirstError = w.FirstError
		}
	}
	if len(o.workers) == 1 && o.workers[0].Held != nil {
		h := o.workers[0].Held
		waits = h.ProbesNs
		f.HeldLocks = float64(h.Locks)
		f.HeldAcquireSec = float64(h.AcquireNs) / 1e9
		f.HeldCPUPct = 100 * float64(h.CPUNs) / float64(h.WindowNs)
		f.HeldBusiestPct = 100 * h.BusiestCPU
		f.Goroutines = float64(h.Goroutines)
		f.BytesPerLock = h.BytesPerLock
		f.Lost = float64(h.Lost)
		f.RenewErrors = float64(h.RenewErrors)
	}
	slices.Sort(waits)
	f.WaitP50 = millis(percentile(waits, 0.50))
	f.WaitP90 = millis(percentile(waits, 0.90))
	f.WaitP99 = millis(percentile(waits, 0.99))
	f.WaitP999 = millis(percentile(waits, 0.999))
	f.WaitMax = millis(percentile(waits, 1))
	if window > 0 {
		f.OpsPerSec = inWin / window.Seconds()
	}
	if len(workers) > 0 {
		f.MinPerWorker, f.MaxPerWorker = float64(slices.Min(workers)), float64(slices.Max(workers))
		if f.MaxPerWorker > 0 {
			f.Fairness = f.MinPerWorker / f.MaxPerWorker
		}
	}
	if f.Ops > 0 {
		f.ClientCPUus = float64(cpu.Microseconds()) / f.Ops
		f.ServerCPUus = float64(o.serverCPU.Microseconds()) / f.Ops
		f.Commands = float64(o.commands) / f.Ops
	}
	return f
}

// medianFigures combines rounds: the median of every figure, the sums of
// the counts of errors and violations.
func medianFigures(rounds []figures) figures {
	if len(rounds) == 0 {
		return figures{}
	}
	var m figures
	for _, field := range floatFields {
		vs := make([]float64, len(rounds))
		for i := range rounds {
			vs[i] = *field(&rounds[i])
		}
		*field(&m) = median(vs)
	}
	for _, r := range rounds {
		m.Errors += r.Errors
		m.Violations += r.Violations
		if m.FirstError == "" {
			m.FirstError = r.FirstError
		}
	}
	return m
}

// floatFields are the figures medianFigures takes the median of.
var floatFields = []func(*figures) *float64{
	func(f *figures) *float64 { return &f.OpsPerSec },
	func(f *figures) *float64 { return &f.Ops },
	func(f *figures) *float64 { return &f.WaitP50 },
	func(f *figures) *float64 { return &f.WaitP90 },
	func(f *figures) *float64 { return &f.WaitP99 },
	func(f *figures) *float64 { return &f.WaitP999 },
	func(f *figures) *float64 { return &f.WaitMax },
	func(f *figures) *float64 { return &f.MinPerWorker },
	func(f *figures) *float64 { return &f.MaxPerWorker },
	func(f *figures) *float64 { return &f.Fairness },
	func(f *figures) *float64 { return &f.ClientCPUus },
	func(f *figures) *float64 { return &f.ServerCPUus },
	func(f *figures) *float64 { return &f.Commands },
	func(f *figures) *float64 { return &f.HeldLocks },
	func(f *figures) *float64 { return &f.HeldAcquireSec },
	func(f *figures) *float64 { return &f.HeldCPUPct },
	func(f *figures) *float64 { return &f.HeldBusiestPct },
	func(f *figures) *float64 { return &f.Goroutines },
	func(f *figures) *float64 { return &f.BytesPerLock },
	func(f *figures) *float64 { return &f.Lost },
	func(f *figures) *float64 { return &f.RenewErrors },
}

// median returns the median of vs (the mean of the middle two for an even
// count); it sorts vs.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[len(vs)/2]
}

// spread returns the lowest and highest of field over the rounds.
func spread(rounds []figures, field func(*figures) *float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range rounds {
		v := *field(&rounds[i])
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// percentile returns the p-quantile (0..1) of sorted by the nearest-rank
// method; zero for an empty slice.
func percentile(sorted []int64, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return time.Duration(sorted[min(max(i, 0), len(sorted)-1)])
}

// millis converts d to fractional milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// report is everything one run found; --json writes it.
type report struct {
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished"`
	Measured     string    `json:"measured"`
	GoVersion    string    `json:"go_version"`
	CPUs         int       `json:"cpus"`
	RedisVersion string    `json:"redis_version"`
	Loads        []float64 `json:"load_1min_at_each_round_and_end"`
	Rounds       int       `json:"rounds"`
	Duration     string    `json:"duration_per_workload_and_round"`
	Request      string    `json:"request_timeout"`
	Procs        int       `json:"procs"`
	ProcWorkers  int       `json:"proc_workers"`
	Held         int       `json:"held"`
	HeldTTL      string    `json:"held_ttl"`
	HeldRenew    string    `json:"held_renew"`
	HeldWindow   string    `json:"held_window"`
	ProbeEvery   string    `json:"probe_every"`

	Ping       figures      `json:"ping"`
	PingRounds []figures    `json:"ping_rounds"`
	Results    []*libResult `json:"results"`
}

// libResult is one library's figures: the median of the rounds for each
// workload, and every round.
type libResult struct {
	Library  string               `json:"library"`
	Settings string               `json:"settings"`
	Median   map[string]figures   `json:"median"`
	Rounds   map[string][]figures `json:"rounds"`
}

// MarshalJSON encodes NaN and ±Inf as 0, which JSON cannot carry.
func (f figures) MarshalJSON() ([]byte, error) {
	for _, field := range floatFields {
		if v := field(&f); math.IsNaN(*v) || math.IsInf(*v, 0) {
			*v = 0
		}
	}
	type plain figures
	return json.Marshal(plain(f))
}
