// Command peers compares fencelock with other Go lock libraries for Redis
// as their users run them, in one run against one private redis-server:
// go-redsync/redsync (v4, go-redis v9), bsm/redislock and
// redis/rueidis/rueidislock, each at its best settings (see libs.go; the
// settings are printed with the results).
//
//	cd bench/peers && go run .            # the full run (about 11 minutes on 2 cores)
//	cd bench/peers && go run . --quick    # shorter workloads (about 5 minutes)
//	go run . --held 100000                # the held-locks workload with 100,000 locks
//	go run . --from results.json          # redraw the table and plot of a run saved with --json
//
// Every measurement runs in worker processes of its own (this binary,
// re-executed), one library at a time: the uncontended and one-process
// workloads in one process with one client shared by its goroutines, as an
// application would use a library; the cross-process workload in --procs
// processes. Every acquire+release gets a fresh request context
// (context.WithTimeout(--request)), as in an HTTP handler, and waits the
// library's own way (fencelock: Client.Acquire, or Client.Do as a second
// entry, "fencelock-Do").
//
// Workloads, each for --duration per library and round:
//
//   - serial: one goroutine takes and releases its own key: cycles/s,
//     acquire latency, client CPU per cycle (getrusage of the worker process
//     around the workload ÷ cycles), server CPU and Redis commands per cycle
//     (INFO cpu and commandstats deltas ÷ cycles). PING round trips from one
//     goroutine are measured in the same rounds, taking their turn among
//     the libraries of this workload: a cycle needs at least two round
//     trips, so PING/s ÷ 2 is the bound.
//   - parallel64: 64 goroutines, each on its own key.
//   - contended: 16 goroutines of one process on one key, each holding it
//     for 1 ms and pausing 1 ms before asking again: hand-offs/s (lock
//     acquisitions/s), the wait in the acquire call (percentiles), and the
//     fewest and most acquisitions of one worker (min/max near 1 is fair;
//     near 0 is starvation).
//   - contended-procs: the same with --procs processes × --proc-workers
//     goroutines, one client per process.
//   - held: one process takes --held locks with a lease of --held-ttl
//     renewed every --held-renew, then for --held-window measures its CPU
//     time (average and busiest second), the latency of a lock+unlock of
//     another key every --probe-every, its goroutines, heap per lock, and
//     locks lost.
//
// A yardstick runs beside them in serial and parallel64: fenced-floor
// (floor.go), the least a lock with fencing tokens can do on go-redis (one
// script of SET NX PX and INCR to acquire, compare-and-delete to release,
// nothing else). It is never the best peer; the text under the table says
// how the best peer and fencelock compare with it, so that what fencing
// costs by itself is told apart from what fencelock's other guarantees
// and its Client cost. A second, fencelock-backend (backendalone.go),
// calls fencelock's Redis backend directly: its scripts without the
// Client, which tells those two apart. Another runs in contended and
// contended-procs:
// fair-floor (fairfloor.go), the least a fenced lock that lines its
// waiters up on the server and wakes the next one by pub/sub can do per
// hand-off (what fencelock-fair does, without place leases, tombstones or
// renewal).
//
// The libraries take turns: in each round every workload runs for each
// library in a rotating order, and the tables show the median of the rounds
// (--rounds), so that a noisy neighbour on the machine hits all libraries
// alike. A shared-memory counter checks that no two workers (of any
// process) are ever inside the contended key at once.
//
// At the end it prints a markdown table (fencelock, every peer, the best
// peer and fencelock ÷ best peer) and writes it to --md, and writes a plot
// of throughput and wait percentiles per library to --svg.
//
// Without --redis it starts a private redis-server (from $PATH) on a free
// loopback port, without persistence, and stops it at the end.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// options are the command-line flags.
type options struct {
	duration, warmup, request time.Duration
	rounds                    int
	addr                      string
	libs, workloads           []string
	procs, procWorkers        int
	held                      int
	heldTTL, heldRenew        time.Duration
	heldWindow, probeEvery    time.Duration
	mdPath, svgPath, jsonPath string
	label                     string
	maxLoad                   float64
	loadWait                  time.Duration
	quiet                     bool // no progress lines
	profileDir                string
	from                      string
}

// Workload parameters that are the same in every run.
const (
	parallelWorkers  = 64
	contendedWorkers = 16
	contendedHold    = time.Millisecond
	contendedThink   = time.Millisecond
	lockTTL          = 10 * time.Second // the cycles' lease; never decides anything
)

func main() {
	if isWorker() {
		workerMain()
		return
	}
	log.SetFlags(0)
	log.SetPrefix("peers: ")
	// Exit status 2 ("could not run"), as for fencelock's other commands:
	// a benchmark has no FAIL, only figures or no figures.
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Print(err)
		os.Exit(2)
	}
	var rep *report
	if o.from != "" {
		rep, err = load(o.from)
	} else {
		rep, err = measure(o)
	}
	if err == nil {
		err = publish(o, rep, os.Stdout)
	}
	if err != nil {
		log.Print(strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
		os.Exit(2)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "shorter run: --duration 1s --held-window 12s (the held window then covers one renewal of every lock)")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "how long each workload runs, per library and round")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds (at least 3 for the published figures); the median round counts")
	fs.DurationVar(&o.warmup, "warmup", 300*time.Millisecond, "unmeasured run in every worker process first, on other keys (dials connections, loads scripts)")
	fs.DurationVar(&o.request, "request", 10*time.Second, "timeout of the request context of every acquire+release")
	fs.StringVar(&o.addr, "redis", "", "use the redis-server at host:port instead of starting one (it is flushed after every job!)")
	libs := fs.String("libs", strings.Join(libraryNames(), ","), "comma-separated libraries to run")
	wls := fs.String("workloads", strings.Join(workloadNames(), ","), "comma-separated workloads to run")
	fs.IntVar(&o.procs, "procs", 4, "contended-procs: worker processes")
	fs.IntVar(&o.procWorkers, "proc-workers", 4, "contended-procs: goroutines per process")
	fs.IntVar(&o.held, "held", 10_000, "held: locks held by one process")
	fs.DurationVar(&o.heldTTL, "held-ttl", 30*time.Second, "held: lease of each lock")
	fs.DurationVar(&o.heldRenew, "held-renew", 10*time.Second, "held: renewal interval")
	fs.DurationVar(&o.heldWindow, "held-window", 25*time.Second, "held: how long to observe once all locks are held (25s covers two renewals of every lock)")
	fs.DurationVar(&o.probeEvery, "probe-every", 10*time.Millisecond, "held: interval of the lock+unlock probe on another key")
	fs.StringVar(&o.mdPath, "md", "results.md", "write the markdown table here (empty: do not)")
	fs.StringVar(&o.svgPath, "svg", "results.svg", "write the plot here (empty: do not)")
	fs.StringVar(&o.jsonPath, "json", "", "also write every figure of every round as JSON here")
	fs.StringVar(&o.label, "label", "", "what is measured, for the output (default: the git commit of the working tree, and whether fencelock's files have uncommitted changes)")
	fs.Float64Var(&o.maxLoad, "max-load", 0, "before each round, wait (up to --load-wait) until the 1-minute load average is below this (0: do not wait)")
	fs.DurationVar(&o.loadWait, "load-wait", 10*time.Minute, "longest wait for --max-load, per round")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines on stderr")
	fs.StringVar(&o.from, "from", "", "measure nothing: print and write the tables and the plot of the run saved with --json in this file")
	fs.StringVar(&o.profileDir, "cpuprofile", "", "write a CPU profile of every job's measured part to this directory (library-workload-round-process.pprof)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			o.duration = time.Second
		}
		if !set["held-window"] {
			o.heldWindow = 12 * time.Second
		}
	}
	o.libs = splitList(*libs)
	o.workloads = splitList(*wls)
	for _, n := range o.libs {
		if _, ok := libraryByName(n); !ok {
			return o, fmt.Errorf("unknown library %q (have %s)", n, strings.Join(libraryNames(), ", "))
		}
	}
	for _, n := range o.workloads {
		if _, ok := workloadByName(n); !ok {
			return o, fmt.Errorf("unknown workload %q (have %s)", n, strings.Join(workloadNames(), ", "))
		}
	}
	switch {
	case o.rounds < 1, o.duration <= 0, o.request <= 0, o.procs < 1, o.procWorkers < 1, o.held < 1,
		o.heldRenew <= 0, o.heldTTL <= o.heldRenew, o.heldWindow <= 0, o.probeEvery <= 0:
		return o, errors.New("--rounds, --duration, --request, --procs, --proc-workers, --held, --held-renew, " +
			"--held-window and --probe-every must be positive, and --held-ttl above --held-renew")
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// workloadDef is one measured pattern.
type workloadDef struct {
	name  string
	kind  string
	title string
}

var workloadDefs = []workloadDef{
	{"serial", kindCycles, "1 goroutine, own key"},
	{"parallel64", kindCycles, "64 goroutines, distinct keys"},
	{"contended", kindCycles, "16 workers in 1 process, one key, hold 1 ms, think 1 ms"},
	{"contended-procs", kindCycles, "across processes, one key, hold 1 ms, think 1 ms"},
	{"held", kindHeld, "held locks with renewal"},
}

func workloadNames() []string {
	names := make([]string, len(workloadDefs))
	for i, w := range workloadDefs {
		names[i] = w.name
	}
	return names
}

func workloadByName(name string) (workloadDef, bool) {
	for _, w := range workloadDefs {
		if w.name == name {
			return w, true
		}
	}
	return workloadDef{}, false
}

// jobFor returns the job of workload w for library lib, and its number of
// processes.
func (o options) jobFor(w workloadDef, lib, addr, prefix, shm string) (job, int) {
	j := job{
		Kind: w.kind, Library: lib, Addr: addr, Prefix: prefix, Warmup: o.warmup,
		Request: o.request, TTL: lockTTL, Duration: o.duration,
	}
	procs := 1
	switch w.name {
	case "serial":
		j.Workers = 1
	case "parallel64":
		j.Workers = parallelWorkers
	case "contended":
		j.Workers, j.Shared, j.Hold, j.Think, j.Shm = contendedWorkers, true, contendedHold, contendedThink, shm
	case "contended-procs":
		j.Workers, j.Shared, j.Hold, j.Think, j.Shm = o.procWorkers, true, contendedHold, contendedThink, shm
		procs = o.procs
	case "held":
		j.Duration = 0
		j.TTL, j.Renew, j.Held, j.Window, j.ProbeEvery = o.heldTTL, o.heldRenew, o.held, o.heldWindow, o.probeEvery
	}
	return j, procs
}

// measure runs every workload for every library, in rounds, and returns the
// report. It stops the redis-server it started before returning.
func measure(o options) (*report, error) {
	rep := &report{
		Started:   time.Now().UTC(),
		Measured:  o.label,
		GoVersion: runtime.Version(),
		CPUs:      runtime.NumCPU(),
		Rounds:    o.rounds,
		Duration:  o.duration.String(),
		Request:   o.request.String(),
		Procs:     o.procs, ProcWorkers: o.procWorkers,
		Held: o.held, HeldTTL: o.heldTTL.String(), HeldRenew: o.heldRenew.String(),
		HeldWindow: o.heldWindow.String(), ProbeEvery: o.probeEvery.String(),
	}
	if rep.Measured == "" {
		rep.Measured = gitLabel()
	}
	if o.addr == "" {
		srv, err := startRedis()
		if err != nil {
			return nil, err
		}
		defer srv.stop()
		o.addr = srv.addr
	}
	admin := redis.NewClient(&redis.Options{Addr: o.addr})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	rep.RedisVersion = redisVersion(ctx, admin)

	tmp, err := os.MkdirTemp("", "peers-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	var wls []workloadDef
	for _, n := range o.workloads {
		w, _ := workloadByName(n)
		wls = append(wls, w)
	}
	for _, n := range o.libs {
		lib, _ := libraryByName(n)
		rep.Results = append(rep.Results, &libResult{Library: lib.name, Settings: lib.settings,
			Median: map[string]figures{}, Rounds: map[string][]figures{}})
	}
	progress := func(format string, args ...any) {
		if !o.quiet {
			fmt.Fprintf(os.Stderr, "peers: "+format+"\n", args...)
		}
	}

	// ping measures PING round trips once, for the bound of the serial
	// workload.
	ping := func() error {
		pj := job{Kind: kindPing, Library: "PING", Addr: o.addr, Warmup: o.warmup, Duration: o.duration}
		out, err := runJob(admin, pj, 1)
		if err != nil {
			return fmt.Errorf("PING: %w", err)
		}
		rep.PingRounds = append(rep.PingRounds, summarize(out))
		return nil
	}
	pingInSerial := slices.ContainsFunc(wls, func(w workloadDef) bool { return w.name == "serial" })
	for r := range o.rounds {
		load := waitForLoad(o, progress)
		rep.Loads = append(rep.Loads, load)
		progress("round %d/%d (load %.2f)", r+1, o.rounds, load)
		if !pingInSerial {
			progress("round %d/%d: PING", r+1, o.rounds)
			if err := ping(); err != nil {
				return nil, err
			}
		}

		for _, w := range wls {
			n := len(rep.Results)
			turns := n
			if w.name == "serial" {
				// PING takes its turn among the libraries (the last index),
				// so that the bound is measured in the same stretch of
				// the machine's speed as the cycles it bounds (it moves
				// by ±30% within minutes on a shared VM).
				turns = n + 1
			}
			for k := range turns {
				if i := (k + r) % turns; i == n {
					progress("round %d/%d: %s PING", r+1, o.rounds, w.name)
					if err := ping(); err != nil {
						return nil, err
					}
					continue
				}
				res := rep.Results[(k+r)%turns]
				lib, _ := libraryByName(res.Library)
				if !lib.runs(w) {
					continue
				}
				progress("round %d/%d: %s %s", r+1, o.rounds, w.name, res.Library)
				prefix := fmt.Sprintf("%s:%s:r%d", res.Library, w.name, r)
				j, procs := o.jobFor(w, res.Library, o.addr, prefix, filepath.Join(tmp, "section"))
				if o.profileDir != "" {
					j.Profile = filepath.Join(o.profileDir, fmt.Sprintf("%s-%s-r%d", res.Library, w.name, r))
				}
				out, err := runJob(admin, j, procs)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", res.Library, w.name, err)
				}
				res.Rounds[w.name] = append(res.Rounds[w.name], summarize(out))
			}
		}
	}
	rep.Loads = append(rep.Loads, loadAverage())
	rep.Finished = time.Now().UTC()
	rep.Ping = medianFigures(rep.PingRounds)
	for _, res := range rep.Results {
		for name, rounds := range res.Rounds {
			res.Median[name] = medianFigures(rounds)
		}
	}
	return rep, nil
}

// publish prints the tables, and writes the markdown, the plot and the JSON.
func publish(o options, rep *report, w *os.File) error {
	details(w, rep)
	md := markdown(rep)
	fmt.Fprintln(w)
	fmt.Fprint(w, md)
	write := func(path string, data []byte) error {
		if path == "" {
			return nil
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "peers: wrote %s\n", path)
		return nil
	}
	if err := write(o.mdPath, []byte(md)); err != nil {
		return err
	}
	if err := write(o.svgPath, []byte(plot(rep))); err != nil {
		return err
	}
	if o.jsonPath != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := write(o.jsonPath, data); err != nil {
			return err
		}
	}
	return nil
}

// load reads a report saved with --json.
func load(path string) (*report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &rep, nil
}

// loadAverage returns the 1-minute load average (0 if unknown).
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// waitForLoad waits, up to --load-wait, for the load average to drop below
// --max-load, and returns the load it starts the round with.
func waitForLoad(o options, progress func(string, ...any)) float64 {
	load := loadAverage()
	if o.maxLoad <= 0 {
		return load
	}
	deadline := time.Now().Add(o.loadWait)
	for load >= o.maxLoad && time.Now().Before(deadline) {
		progress("load %.2f is not below %.2f: waiting", load, o.maxLoad)
		time.Sleep(15 * time.Second)
		load = loadAverage()
	}
	return load
}

// gitLabel describes the fencelock source being measured: the commit of the
// working tree, and the files of the fencelock module (outside bench/) with
// uncommitted changes, which the build includes through the replace
// directive.
func gitLabel() string {
	head, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown source (not a git checkout)"
	}
	label := "commit " + strings.TrimSpace(string(head))
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return label
	}
	cmd := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench")
	cmd.Dir = strings.TrimSpace(string(top))
	st, err := cmd.Output()
	if err != nil {
		return label
	}
	if lines := strings.TrimSpace(string(st)); lines != "" {
		n := strings.Count(lines, "\n") + 1
		label += fmt.Sprintf(" plus uncommitted changes to %d files", n)
	}
	return label
}

func redisVersion(ctx context.Context, admin *redis.Client) string {
	info, err := admin.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
