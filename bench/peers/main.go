// Command peers compares fencelock with other Go lock libraries for Redis,
// measured in the same run against the same redis-server:
// go-redsync/redsync (v4, go-redis v9 pool), bsm/redislock and
// redis/rueidis/rueidislock.
//
// Each library runs three workloads, each for --duration in every round:
//
//   - serial: one goroutine takes and releases its own key, one attempt per
//     acquisition (no contention): the latency of a lock+unlock cycle.
//   - parallel64: 64 goroutines do the same, each on its own key: how much
//     of the server's capacity the library can use.
//   - contended: 16 goroutines take one key in turn, each holding it for
//     1 ms and pausing 1 ms before asking again, waiting the library's
//     natural way (fencelock: Client.Acquire, woken by pub/sub; redsync:
//     retry every 50 ms; redislock: linear backoff of 100 ms; rueidislock:
//     WithContext, woken by client-side-caching invalidations). The lease is
//     10 s, so expiry never decides who gets the lock. Reported: cycles/s,
//     the time spent waiting in the acquire call (p50, p99), and the fewest
//     and most acquisitions one worker made (a low minimum is starvation).
//
// By default the contended workers share one client, as the goroutines of
// one process would. fencelock (a per-Client wait queue) and rueidislock (a
// per-Locker gate) then hand the lock over mostly inside the process, while
// redsync and redislock poll the server. With --separate-clients every
// worker has its own client, as if each were a process: then every library
// hands over through the server (fencelock: pub/sub release messages).
//
// The libraries take turns: within each round, every workload runs for
// each library in a rotating order, and the tables show the median of the
// rounds (--rounds, default 3), so that a noisy neighbour on the machine
// hits all libraries alike; the spread table shows how noisy it was.
//
// Every workload counts, per key, the workers inside the critical section
// and reports a violation whenever a worker finds another one there; only
// the contended workload can meet one, and it should never happen.
//
// The ratio table divides fencelock's figure by the peer's ("fencelock ÷
// peer"). Above 1 is better for fencelock on ops/s and cycles/s (it is that
// many times faster); below 1 is better on wait times (it waits that
// fraction of the peer's wait). For acquisitions per worker, min and max
// close together mean fair hand-over; a min ratio above 1 means fencelock's
// least served worker got more turns than the peer's. A fair lock has a
// high p50 wait by design (every worker queues behind the others, about
// workers × (hold + hand-over)), while a polling lock that lets the last
// holder take it again shows a tiny p50 and a huge p99: read p50 together
// with p99 and min/max.
//
// The diagnostics table shows the uncontended acquire latency and the CPU
// time per acquire+release of this process and of redis-server (from INFO
// cpu): on a small machine both share the cores, so CPU per operation
// predicts the parallel throughput.
//
// Run it from this directory (it is its own module, so that library users
// do not pull in the peers):
//
//	cd bench/peers && go run . [--duration 3s] [--rounds 3] [--separate-clients]
//		[--redis host:port] [--libs fencelock,redsync] [--json]
//
// Without --redis it starts a private redis-server (from $PATH) on a free
// loopback port, without persistence, and stops it at the end.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// Workload parameters; the same for every library.
const (
	parallelWorkers  = 64
	contendedWorkers = 16
	contendedHold    = time.Millisecond
	contendedPause   = time.Millisecond
	lockTTL          = 10 * time.Second // never decides anything
	maxWait          = 10 * time.Second // bound of one waiting acquire
	poolSize         = 256              // go-redis pool of every go-redis based library
)

// options are the command-line flags.
type options struct {
	duration, warmup time.Duration
	rounds           int
	addr             string
	libs             []string
	separate, asJSON bool
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "how long each workload runs, per library and round")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; the libraries take turns within each workload and round, and the median round counts")
	flag.DurationVar(&o.warmup, "warmup", 300*time.Millisecond, "unmeasured parallel run per client first (dials connections, loads scripts)")
	flag.StringVar(&o.addr, "redis", "", "use the redis-server at host:port instead of starting one")
	libs := flag.String("libs", strings.Join(libraryNames(), ","), "comma-separated libraries to run")
	flag.BoolVar(&o.separate, "separate-clients", false, "contended: give every worker its own client, as if each were a process (default: one client shared by all)")
	flag.BoolVar(&o.asJSON, "json", false, "print JSON instead of tables")
	flag.Parse()
	o.libs = strings.Split(*libs, ",")
	log.SetFlags(0)
	log.SetPrefix("peers: ")

	rep, err := measure(o)
	if err != nil {
		log.Fatal(err)
	}
	if o.asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			log.Fatal(err)
		}
		return
	}
	printTables(os.Stdout, rep)
}

// measure runs every workload for every library, in rounds, and returns the
// report. It stops the redis-server it started before returning.
func measure(o options) (report, error) {
	if o.rounds < 1 || o.duration <= 0 {
		return report{}, errors.New("--rounds and --duration must be positive")
	}
	if o.addr == "" {
		srv, err := startRedis()
		if err != nil {
			return report{}, err
		}
		defer srv.stop()
		o.addr = srv.addr
	}
	admin := redis.NewClient(&redis.Options{Addr: o.addr})
	defer admin.Close()

	// Connect every library first, so that all rounds use the same clients.
	// lockers[i][wi] are the clients library i uses for workload wi.
	var (
		selected []library
		lockers  [][][]locker
		opened   []locker // every client, to close at the end
	)
	defer func() {
		for _, l := range opened {
			l.close()
		}
	}()
	connect := func(lib library, n int) ([]locker, error) {
		ls := make([]locker, n)
		for i := range ls {
			l, err := lib.connect(o.addr)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", lib.name, err)
			}
			ls[i] = l
			opened = append(opened, l)
		}
		if o.warmup > 0 {
			run(ls, admin, workloads[1], lib.name+":warmup", o.warmup)
		}
		return ls, nil
	}
	for _, name := range o.libs {
		lib, ok := libraryByName(strings.TrimSpace(name))
		if !ok {
			return report{}, fmt.Errorf("unknown library %q (have %s)", name, strings.Join(libraryNames(), ", "))
		}
		shared, err := connect(lib, 1)
		if err != nil {
			return report{}, err
		}
		contendedLockers := shared
		if o.separate {
			if contendedLockers, err = connect(lib, contendedWorkers); err != nil {
				return report{}, err
			}
		}
		selected = append(selected, lib)
		lockers = append(lockers, [][]locker{shared, shared, contendedLockers})
	}

	// samples[lib][workload] holds one stats per round.
	samples := make([][][]stats, len(selected))
	for i := range samples {
		samples[i] = make([][]stats, len(workloads))
	}
	for r := range o.rounds {
		for wi, w := range workloads {
			// Rotate the order each round so that no library always runs
			// right after another's heavy workload.
			for k := range selected {
				i := (k + r) % len(selected)
				if !o.asJSON {
					fmt.Fprintf(os.Stderr, "round %d/%d: %s %s\n", r+1, o.rounds, w.name, selected[i].name)
				}
				prefix := fmt.Sprintf("%s:%s:r%d", selected[i].name, w.name, r)
				samples[i][wi] = append(samples[i][wi], run(lockers[i][wi], admin, w, prefix, o.duration))
			}
		}
	}

	rep := report{Redis: o.addr, Duration: o.duration.String(), Rounds: o.rounds, SeparateClients: o.separate}
	for i, lib := range selected {
		res := libraryResult{Library: lib.name, Rounds: map[string][]stats{}}
		for wi, w := range workloads {
			res.Rounds[w.name] = samples[i][wi]
		}
		res.Serial, res.Parallel64, res.Contended = median(samples[i][0]), median(samples[i][1]), median(samples[i][2])
		rep.Results = append(rep.Results, res)
	}
	rep.Ratios = ratios(rep.Results)
	return rep, nil
}

// report is everything one run found; it is what --json prints.
type report struct {
	Redis    string `json:"redis"`
	Duration string `json:"duration_per_workload_and_round"`
	Rounds   int    `json:"rounds"`
	// SeparateClients: the contended workers each had their own client.
	SeparateClients bool            `json:"contended_separate_clients"`
	Results         []libraryResult `json:"results"`
	Ratios          []ratio         `json:"ratios_fencelock_over_peer"`
}

// libraryResult is one library's figures: the median of the rounds for
// each workload, and every round.
type libraryResult struct {
	Library    string             `json:"library"`
	Serial     stats              `json:"serial"`
	Parallel64 stats              `json:"parallel64"`
	Contended  stats              `json:"contended"`
	Rounds     map[string][]stats `json:"rounds"`
}

// ratio is fencelock's figure divided by one peer's, for each figure of
// the main table. A ratio with a zero denominator is +Inf (JSON: null).
type ratio struct {
	Peer         string    `json:"peer"`
	Serial       jsonFloat `json:"serial_ops"`
	Parallel64   jsonFloat `json:"parallel64_ops"`
	Cycles       jsonFloat `json:"contended_cycles"`
	WaitP50      jsonFloat `json:"contended_wait_p50"`
	WaitP99      jsonFloat `json:"contended_wait_p99"`
	MinPerWorker jsonFloat `json:"contended_min_acquisitions_per_worker"`
	MaxPerWorker jsonFloat `json:"contended_max_acquisitions_per_worker"`
}

// jsonFloat is a float64 that encodes NaN and ±Inf as null.
type jsonFloat float64

// MarshalJSON implements json.Marshaler.
func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v)
}

// ratios divides fencelock's figures by every other library's.
func ratios(results []libraryResult) []ratio {
	i := slices.IndexFunc(results, func(r libraryResult) bool { return r.Library == fencelockName })
	if i < 0 {
		return nil
	}
	fl := results[i]
	div := func(a, b float64) jsonFloat {
		switch {
		case b != 0:
			return jsonFloat(a / b)
		case a == 0:
			return jsonFloat(math.NaN())
		default:
			return jsonFloat(math.Inf(1))
		}
	}
	var out []ratio
	for _, p := range results {
		if p.Library == fencelockName {
			continue
		}
		f, c := fl.Contended, p.Contended
		out = append(out, ratio{
			Peer:         p.Library,
			Serial:       div(fl.Serial.OpsPerSec, p.Serial.OpsPerSec),
			Parallel64:   div(fl.Parallel64.OpsPerSec, p.Parallel64.OpsPerSec),
			Cycles:       div(f.OpsPerSec, c.OpsPerSec),
			WaitP50:      div(f.WaitP50ms, c.WaitP50ms),
			WaitP99:      div(f.WaitP99ms, c.WaitP99ms),
			MinPerWorker: div(float64(f.MinPerWorker), float64(c.MinPerWorker)),
			MaxPerWorker: div(float64(f.MaxPerWorker), float64(c.MaxPerWorker)),
		})
	}
	return out
}

// printTables writes the results, the ratios, the diagnostics, the spread
// over rounds and any errors.
func printTables(w io.Writer, r report) {
	fmt.Fprintf(w, "redis %s; %s per workload, library and round; median of %d rounds\n", r.Redis, r.Duration, r.Rounds)
	clients := "one client shared by all workers"
	if r.SeparateClients {
		clients = "one client per worker"
	}
	fmt.Fprintf(w, "contended: %d workers on one key, %s, hold %v, pause %v, lease %v\n\n",
		contendedWorkers, clients, contendedHold, contendedPause, lockTTL)

	table(w, "library\tserial ops/s\tparallel64 ops/s\tcontended cycles/s\twait p50 ms\twait p99 ms\twait max ms\tacq/worker min/max\tviolations\terrors", func(row func(...any)) {
		for _, x := range r.Results {
			c := x.Contended
			row(x.Library, x.Serial.OpsPerSec, x.Parallel64.OpsPerSec, c.OpsPerSec, c.WaitP50ms, c.WaitP99ms, c.WaitMaxms,
				fmt.Sprintf("%d / %d", c.MinPerWorker, c.MaxPerWorker),
				x.Serial.Violations+x.Parallel64.Violations+c.Violations,
				x.Serial.Errors+x.Parallel64.Errors+c.Errors)
		}
	})

	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nfencelock ÷ peer (ops/s, cycles/s, min acq: above 1 favours fencelock; waits: below 1 favours fencelock)")
		table(w, "peer\tserial\tparallel64\tcycles/s\twait p50\twait p99\tmin acq\tmax acq", func(row func(...any)) {
			for _, x := range r.Ratios {
				row(x.Peer, x.Serial, x.Parallel64, x.Cycles, x.WaitP50, x.WaitP99, x.MinPerWorker, x.MaxPerWorker)
			}
		})
	}

	fmt.Fprintln(w, "\ndiagnostics: uncontended acquire latency; CPU per acquire+release (client: this process; server: redis-server)")
	table(w, "library\tserial acquire p50/p99 µs\tparallel64 acquire p50/p99 µs\tCPU µs serial cli/srv\tparallel64 cli/srv\tcontended cli/srv", func(row func(...any)) {
		for _, x := range r.Results {
			row(x.Library,
				fmt.Sprintf("%.0f / %.0f", 1000*x.Serial.WaitP50ms, 1000*x.Serial.WaitP99ms),
				fmt.Sprintf("%.0f / %.0f", 1000*x.Parallel64.WaitP50ms, 1000*x.Parallel64.WaitP99ms),
				cpu(x.Serial), cpu(x.Parallel64), cpu(x.Contended))
		}
	})

	if r.Rounds > 1 {
		fmt.Fprintln(w, "\nspread over rounds (lowest–highest)")
		table(w, "library\tserial ops/s\tparallel64 ops/s\tcontended cycles/s\twait p99 ms", func(row func(...any)) {
			for _, x := range r.Results {
				row(x.Library, spread(x.Rounds["serial"], opsPerSec), spread(x.Rounds["parallel64"], opsPerSec),
					spread(x.Rounds["contended"], opsPerSec), spread(x.Rounds["contended"], waitP99))
			}
		})
	}

	for _, x := range r.Results {
		for _, wl := range workloads {
			var n int64
			var first string
			for _, s := range x.Rounds[wl.name] {
				n += s.Errors
				if first == "" {
					first = s.FirstError
				}
			}
			if n > 0 {
				fmt.Fprintf(w, "\n%s %s: %d errors, first: %s", x.Library, wl.name, n, first)
			}
		}
	}
	fmt.Fprintln(w)
}

// table writes a right-aligned table: the tab-separated header, then the
// rows fill adds. Floats are printed with one decimal below 100, none above;
// ratios as "1.23×".
func table(w io.Writer, header string, fill func(row func(...any))) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header+"\t")
	fill(func(cells ...any) {
		for _, c := range cells {
			fmt.Fprint(tw, cell(c), "\t")
		}
		fmt.Fprintln(tw)
	})
	tw.Flush()
}

func cell(c any) string {
	switch v := c.(type) {
	case float64:
		if v >= 100 {
			return fmt.Sprintf("%.0f", v)
		}
		return fmt.Sprintf("%.1f", v)
	case jsonFloat:
		switch f := float64(v); {
		case math.IsNaN(f):
			return "-"
		case math.IsInf(f, 0):
			return "∞"
		default:
			return fmt.Sprintf("%.2f×", f)
		}
	default:
		return fmt.Sprint(v)
	}
}

func cpu(s stats) string { return fmt.Sprintf("%.0f / %.0f", s.ClientCPUus, s.ServerCPUus) }

func opsPerSec(s stats) float64 { return s.OpsPerSec }
func waitP99(s stats) float64   { return s.WaitP99ms }

// spread formats the lowest and highest of f over the rounds.
func spread(rounds []stats, f func(stats) float64) string {
	if len(rounds) == 0 {
		return "-"
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range rounds {
		lo, hi = min(lo, f(s)), max(hi, f(s))
	}
	return cell(lo) + "–" + cell(hi)
}
