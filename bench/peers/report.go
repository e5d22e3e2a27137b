package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the markdown table.
type row struct {
	label    string
	workload string
	higher   bool                    // higher is better
	value    func(f figures) float64 // compared, and divided for the ratio
	cell     func(f figures) string  // shown
}

// rows returns the lines of the markdown table for r.
func rows(r *report) []row {
	bound := r.Ping.OpsPerSec / 2 // a cycle is at least two round trips
	ops := func(f figures) float64 { return f.OpsPerSec }
	opsCell := func(f figures) string { return count(f.OpsPerSec) }
	p99 := func(f figures) float64 { return f.WaitP99 }
	p99Cell := func(f figures) string { return duration(f.WaitP99) }
	fair := func(f figures) float64 { return f.Fairness }
	fairCell := func(f figures) string {
		return fmt.Sprintf("%.0f / %.0f (%.2f)", f.MinPerWorker, f.MaxPerWorker, f.Fairness)
	}
	procs := fmt.Sprintf("%d processes × %d workers", r.Procs, r.ProcWorkers)
	held := fmt.Sprintf("%s held locks (ttl %s, renewed every %s)", count(float64(r.Held)), r.HeldTTL, r.HeldRenew)
	return []row{
		{"1 goroutine: acquire+release cycles/s (% of the 2×PING bound)", "serial", true, ops,
			func(f figures) string {
				if bound <= 0 {
					return count(f.OpsPerSec)
				}
				return fmt.Sprintf("%s (%.0f%%)", count(f.OpsPerSec), 100*f.OpsPerSec/bound)
			}},
		{"1 goroutine: acquire p50", "serial", false,
			func(f figures) float64 { return f.WaitP50 }, func(f figures) string { return duration(f.WaitP50) }},
		{"64 goroutines, distinct keys: cycles/s", "parallel64", true, ops, opsCell},
		// On 2 cores the 64-goroutine rate is bounded by what a cycle costs
		// the client and Redis together: this row is that budget.
		{"… same: CPU per cycle, client + Redis", "parallel64", false,
			func(f figures) float64 { return f.ClientCPUus + f.ServerCPUus },
			func(f figures) string { return fmt.Sprintf("%.0f + %.0f µs", f.ClientCPUus, f.ServerCPUus) }},
		{"client CPU per uncontended cycle (1 goroutine)", "serial", false,
			func(f figures) float64 { return f.ClientCPUus },
			func(f figures) string { return fmt.Sprintf("%.0f µs", f.ClientCPUus) }},
		{"Redis commands per uncontended cycle", "serial", false,
			func(f figures) float64 { return f.Commands },
			func(f figures) string { return fmt.Sprintf("%.1f", f.Commands) }},
		{"Redis CPU per uncontended cycle (1 goroutine)", "serial", false,
			func(f figures) float64 { return f.ServerCPUus },
			func(f figures) string { return fmt.Sprintf("%.0f µs", f.ServerCPUus) }},
		{"16 workers in 1 process, one key, hold 1 ms, think 1 ms: hand-offs/s", "contended", true, ops, opsCell},
		{"… same: p99 wait", "contended", false, p99, p99Cell},
		{"… same: acquisitions per worker min / max (ratio)", "contended", true, fair, fairCell},
		{procs + ", one key, hold 1 ms, think 1 ms: hand-offs/s", "contended-procs", true, ops, opsCell},
		{"… same: p99 wait", "contended-procs", false, p99, p99Cell},
		{"… same: acquisitions per worker min / max (ratio)", "contended-procs", true, fair, fairCell},
		{held + ": client CPU, average (busiest second)", "held", false,
			func(f figures) float64 { return f.HeldCPUPct },
			func(f figures) string {
				return fmt.Sprintf("%.1f%% (%.0f%%) of a core", f.HeldCPUPct, f.HeldBusiestPct)
			}},
		{"… same: lock+unlock of another key, p99 / max", "held", false, p99,
			func(f figures) string { return duration(f.WaitP99) + " / " + duration(f.WaitMax) }},
		{"… same: goroutines in the process (all of them)", "held", false,
			func(f figures) float64 { return f.Goroutines }, func(f figures) string { return count(f.Goroutines) }},
		{"… same: memory per held lock (heap + stacks)", "held", false,
			func(f figures) float64 { return f.BytesPerLock },
			func(f figures) string { return count(f.BytesPerLock) + " B" }},
		{"… same: locks lost", "held", false,
			func(f figures) float64 { return f.Lost }, func(f figures) string { return count(f.Lost) }},
	}
}

// markdown returns the results table, with what was measured and how.
func markdown(r *report) string {
	var b strings.Builder
	libs := append([]*libResult(nil), r.Results...)
	fmt.Fprintf(&b, "| metric | better |")
	for _, x := range libs {
		fmt.Fprintf(&b, " %s |", x.Library)
	}
	fmt.Fprintf(&b, " best peer | fencelock ÷ best peer |\n|---|---|")
	for range libs {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---:|\n")

	var fl *libResult
	for _, x := range libs {
		if x.Library == fencelockName {
			fl = x
		}
	}
	for _, rw := range rows(r) {
		present := false
		for _, x := range libs {
			if _, ok := x.Median[rw.workload]; ok {
				present = true
			}
		}
		if !present {
			continue
		}
		better := "lower"
		if rw.higher {
			better = "higher"
		}
		fmt.Fprintf(&b, "| %s | %s |", rw.label, better)
		for _, x := range libs {
			f, ok := x.Median[rw.workload]
			if !ok {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&b, " %s%s |", rw.cell(f), dagger(f))
		}
		best := bestPeer(libs, rw.workload, rw.value, rw.higher)
		ratio := "–"
		if best != nil {
			bf := best.Median[rw.workload]
			fmt.Fprintf(&b, " %s: %s%s |", best.Library, rw.cell(bf), dagger(bf))
			if fl != nil {
				if f, ok := fl.Median[rw.workload]; ok {
					ratio = ratioCell(rw.value(f), rw.value(bf))
				}
			}
		} else {
			b.WriteString(" – |")
		}
		fmt.Fprintf(&b, " %s |\n", ratio)
	}

	b.WriteString("\n")
	fmt.Fprintf(&b, "Measured: %s; %s to %s UTC; Go %s, %d CPUs, one private redis-server %s on loopback. ",
		r.Measured, r.Started.Format("2006-01-02 15:04"), r.Finished.Format("15:04"), r.GoVersion, r.CPUs, r.RedisVersion)
	fmt.Fprintf(&b, "1-minute load average at the start of each round and at the end: %s. ", loads(r.Loads))
	fmt.Fprintf(&b, "Each figure is the median of %d rounds; libraries take turns in a rotating order; %s per workload, library and round. ",
		r.Rounds, r.Duration)
	if r.Ping.OpsPerSec > 0 {
		fmt.Fprintf(&b, "PING from one goroutine (go-redis): %s round trips/s, p50 %s, so the 2×PING bound is %s cycles/s. ",
			count(r.Ping.OpsPerSec), duration(r.Ping.WaitP50), count(r.Ping.OpsPerSec/2))
	}
	fmt.Fprintf(&b, "Every acquire+release has its own request context (context.WithTimeout %s). ", r.Request)
	fmt.Fprintf(&b, "Ratio: fencelock's figure ÷ the best peer's; above 1 favours fencelock where higher is better, below 1 where lower is better. ")
	b.WriteString(floorSentence(r))
	b.WriteString(backendAloneSentence(r))
	b.WriteString(fairFloorSentence(r))
	fmt.Fprintf(&b, "Held locks: one process takes them all (64 goroutines), then is observed for %s; the probe takes and releases another key every %s.\n",
		r.HeldWindow, r.ProbeEvery)
	fmt.Fprintf(&b, "\nSettings (%s):\n\n", goRedisSettings)
	for _, x := range libs {
		fmt.Fprintf(&b, "- %s: %s.\n", x.Library, x.Settings)
	}
	var bad []string
	for _, x := range libs {
		for _, w := range workloadNames() {
			f, ok := x.Median[w]
			if !ok {
				continue
			}
			if f.Violations > 0 {
				bad = append(bad, fmt.Sprintf("%s %s: %d times two workers were inside at once", x.Library, w, f.Violations))
			}
			if f.Errors > 0 {
				bad = append(bad, fmt.Sprintf("%s %s: %d errors over the rounds, the first: %s", x.Library, w, f.Errors, f.FirstError))
			}
		}
	}
	if len(bad) > 0 {
		b.WriteString("\nErrors and violations (marked † in the table; a failed acquire's time until it gave up counts as a wait):\n\n")
		for _, s := range bad {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	return b.String()
}

// details writes every figure per workload and library, and the spread
// over the rounds, as aligned text.
func details(w io.Writer, r *report) {
	fmt.Fprintf(w, "measured: %s; redis %s; load %s\n", r.Measured, r.RedisVersion, loads(r.Loads))
	if r.Ping.OpsPerSec > 0 {
		lo, hi := spread(r.PingRounds, func(f *figures) *float64 { return &f.OpsPerSec })
		fmt.Fprintf(w, "PING: %s/s (rounds %s–%s), p50 %s, p99 %s\n", count(r.Ping.OpsPerSec), count(lo), count(hi),
			duration(r.Ping.WaitP50), duration(r.Ping.WaitP99))
	}
	for _, wd := range workloadDefs {
		var have []*libResult
		for _, x := range r.Results {
			if _, ok := x.Median[wd.name]; ok {
				have = append(have, x)
			}
		}
		if len(have) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s (median of %d rounds; ops/s spread lowest–highest)\n", wd.name, wd.title, r.Rounds)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		if wd.kind == kindHeld {
			fmt.Fprintln(tw, "library\tlocks\ttake all s\tCPU % avg\tbusiest s %\tprobe p50\tp99\tp99.9\tmax\tgoroutines\tB/lock\tlost\trenew errors\terrors\t")
		} else {
			fmt.Fprintln(tw, "library\tops/s\tspread\twait p50\tp90\tp99\tp99.9\tmax\tmin/max per worker\tcli µs/op\tsrv µs/op\tcmds/op\terrors\tviolations\t")
		}
		for _, x := range have {
			f := x.Median[wd.name]
			if wd.kind == kindHeld {
				fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", x.Library,
					count(f.HeldLocks), f.HeldAcquireSec, f.HeldCPUPct, f.HeldBusiestPct,
					duration(f.WaitP50), duration(f.WaitP99), duration(f.WaitP999), duration(f.WaitMax),
					count(f.Goroutines), count(f.BytesPerLock), count(f.Lost), count(f.RenewErrors), f.Errors)
				continue
			}
			lo, hi := spread(x.Rounds[wd.name], func(f *figures) *float64 { return &f.OpsPerSec })
			fmt.Fprintf(tw, "%s\t%s\t%s–%s\t%s\t%s\t%s\t%s\t%s\t%.0f/%.0f\t%.0f\t%.0f\t%.1f\t%d\t%d\t\n", x.Library,
				count(f.OpsPerSec), count(lo), count(hi),
				duration(f.WaitP50), duration(f.WaitP90), duration(f.WaitP99), duration(f.WaitP999), duration(f.WaitMax),
				f.MinPerWorker, f.MaxPerWorker, f.ClientCPUus, f.ServerCPUus, f.Commands, f.Errors, f.Violations)
		}
		tw.Flush()
	}
}

// dagger marks the figures of a workload that had errors or violations.
func dagger(f figures) string {
	if f.Errors > 0 || f.Violations > 0 {
		return " †"
	}
	return ""
}

// ratioCell formats a ÷ b.
func ratioCell(a, b float64) string {
	switch {
	case b == 0 && a == 0:
		return "–"
	case b == 0:
		return "∞"
	}
	switch q := a / b; {
	case q >= 10:
		return fmt.Sprintf("%.0f×", q)
	case q == 0:
		return "0×"
	case q < 0.01: // one significant digit, never an exponent
		return strconv.FormatFloat(q, 'f', -int(math.Floor(math.Log10(q))), 64) + "×"
	default:
		return fmt.Sprintf("%.2f×", q)
	}
}

// count formats v as a whole number with thousands separators.
func count(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	if v < 0 && s != "0" {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// duration formats ms milliseconds: µs below 1 ms, ms below 1 s, then s.
func duration(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	switch {
	case math.IsNaN(ms):
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", ms*1000)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", ms)
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", ms)
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", ms/1000)
	default:
		return fmt.Sprintf("%.0f s", ms/1000)
	}
}

func loads(ls []float64) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = fmt.Sprintf("%.2f", l)
	}
	return strings.Join(s, ", ")
}

// floorSentence says how fencelock and the best peer compare with the
// fenced-floor yardstick in the uncontended workloads, or nothing when it
// was not measured.
func floorSentence(r *report) string {
	return yardstickSentence(r, fencedFloorName,
		"the least a lock with fencing tokens can do", "cycles/s",
		[]workloadLabel{{"serial", "1 goroutine"}, {"parallel64", "64 goroutines"}},
		[]string{fencelockName, backendAloneName})
}

// backendAloneSentence says how fencelock and the best peer compare with
// the fencelock-backend yardstick in the uncontended workloads, or nothing
// when it was not measured.
func backendAloneSentence(r *report) string {
	return yardstickSentence(r, backendAloneName,
		"fencelock's Redis backend without the Client", "cycles/s",
		[]workloadLabel{{"serial", "1 goroutine"}, {"parallel64", "64 goroutines"}},
		[]string{fencelockName})
}

// fairFloorSentence says how fencelock, fencelock-fair and the best peer
// compare with the fair-floor yardstick in the contended workloads, or
// nothing when it was not measured.
func fairFloorSentence(r *report) string {
	return yardstickSentence(r, fairFloorName,
		"the least a fenced lock that lines its waiters up on the server and wakes them by pub/sub can do", "hand-offs/s",
		[]workloadLabel{{"contended", "1 process"}, {"contended-procs", "across processes"}},
		[]string{fencelockFairName, fencelockName})
}

// workloadLabel names a workload in a sentence.
type workloadLabel struct{ name, label string }

// yardstickSentence says, for each of workloads the yardstick ran, its
// throughput (in unit), its ratio to the best peer, and what share of it
// each of the compared libraries made; nothing when it was not measured.
func yardstickSentence(r *report, yardstick, what, unit string, workloads []workloadLabel, compared []string) string {
	byName := map[string]*libResult{}
	for _, x := range r.Results {
		byName[x.Library] = x
	}
	floor := byName[yardstick]
	if floor == nil {
		return ""
	}
	var parts []string
	for _, w := range workloads {
		ff, ok := floor.Median[w.name]
		if !ok || ff.OpsPerSec <= 0 {
			continue
		}
		part := fmt.Sprintf("%s: %s %s", w.label, count(ff.OpsPerSec), unit)
		if best := bestPeer(r.Results, w.name, func(f figures) float64 { return f.OpsPerSec }, true); best != nil {
			part += fmt.Sprintf(", %.2f× %s", ff.OpsPerSec/best.Median[w.name].OpsPerSec, best.Library)
		}
		for _, name := range compared {
			if x := byName[name]; x != nil {
				if f, ok := x.Median[w.name]; ok {
					part += fmt.Sprintf("; %s %.0f%% of it", name, 100*f.OpsPerSec/ff.OpsPerSec)
				}
			}
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	return yardstick + ", " + what + " (not a library; see its settings): " + strings.Join(parts, "; ") + ". "
}

// bestPeer returns the peer (never fencelock or a yardstick) with the
// best value in workload, higher or lower, or nil when no peer ran it.
func bestPeer(libs []*libResult, workload string, value func(figures) float64, higher bool) *libResult {
	var best *libResult
	for _, x := range libs {
		f, ok := x.Median[workload]
		if !ok || !isPeer(x.Library) {
			continue
		}
		if best == nil || (higher && value(f) > value(best.Median[workload])) ||
			(!higher && value(f) < value(best.Median[workload])) {
			best = x
		}
	}
	return best
}
