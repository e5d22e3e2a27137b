package demo

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/cmd/internal/cliflags"
	"github.com/fencelock/fencelock/cmd/internal/exitcode"
)

const demoUsage = `Usage: fencelock demo [flags]

Starts W worker processes (this binary, re-executed) that contend for one
lock, each iteration: acquire, mark itself inside (a Redis counter that must
read 1), write to a fenced store, hold, write again, leave, release. The
master watches, pauses or kills holders, or restarts redis-server, and prints
a table: overlaps seen, stale writes attempted and accepted (must be 0),
fences, hand-off latency, and PASS/FAIL per scenario. Exit status: 0 all
PASS, 1 any FAIL, 2 the demo could not run, 130 interrupted.

Without --redis (or $REDIS_URL) it starts a private redis-server on a free
port. With one, it uses keys under fencelock-demo:* and deletes them after;
the restart, failover and cluster-failover scenarios are then skipped.

In failover and cluster-failover the lock lives on a replicated Redis the
demo starts (a Sentinel group: 1 master, 2 replicas, 3 sentinels; or a
Cluster of 3 masters with a replica each); the demo's own redis-server keeps
only its checks. The master waits until a worker holds the lock, stalls the
replicas (the holder's renewals then reach the master only), kill -9s the
master, and lets a replica be promoted and the old master rejoin, --failovers
times, while the workers iterate. Without --replica-ack the promoted replica
may end the holder's lease early, and another worker acquire the lock while
the holder still believes it holds it (a lock lost silently): the fence
refuses the holder's late writes. With --replica-ack 1 (redisbackend.
WithReplicaAck) renewals no replica acknowledged do not count, so the holder
is told before the lock can pass on. Run both to compare.

In fair, 4 worker processes of 4 goroutines each (whatever --workers says)
take the lock for 1 ms each, first with plain Acquire, then with
fencelock.WithFairness (one line of waiters on the server), and the table
compares them: hand-offs per second, waits, turns per worker. Then the
master kill -9s a worker process while its goroutines wait in line: the
line stalls until their places lapse (driver.PlaceLease), no longer.
--iterations does not apply to it.

In semaphore, rwlock, election and jobs, the primitives run in worker
processes of their own (whatever --workers says): a 3-permit
Client.Semaphore (4 processes x 3 goroutines; a permit holder is kill
-9ed), a Client.RWLock (4 x (1 writer + 3 readers)), Campaign and Resign
watched by Observe (4 candidates; the leader is kill -9ed), and RunJob
every second in 3 processes beside the plain TryAcquire pattern
(--iterations sets the ticks). Holders count themselves in on the server
and their intervals are swept: FAIL on more holders than the rule allows,
a fence regression, a stale write accepted, a tick RunJob ran twice, or a
kill never recovered from; rates, waits and hand-overs are figures.

With --backend redlock (--masters 3 or 5) or --backend etcd, the lock lives
on another store the demo starts: independent redis-servers under a Redlock
quorum (package redlock), or a 3-member etcd cluster (etcdbackend). The
checks and the fenced store stay on the demo's own redis-server. mutex,
expiry, renew, pause, crash and restart run there (on etcd with leases of
whole seconds, etcd's unit); restart kill -9s a minority of the Redlock
masters (down longer than the lease) or every etcd member, and the lock
held across it must be kept. The failover scenarios are Redis-only; the
fair lock and the primitives are skipped, with the reason. The etcd backend
is not in the fencelock command, so that it does not contain etcd's
client: from a checkout, --backend etcd builds and runs cmd/etcddemo.

Backends (--backend):
%s
Scenarios (default iterations per worker, or failovers, in brackets):
%s
Flags:
`

// MainOptions configures Main.
type MainOptions struct {
	// WorkerCommand is the argv that starts a worker process, which must
	// call WorkerMain (with the same Backends). Required.
	WorkerCommand []string
	// Backends are the backends this program has beyond the built-in ones
	// (redis, redlock).
	Backends []*Backend
	// DefaultBackend is --backend's default (BackendRedis when empty).
	DefaultBackend string
}

// Main is "fencelock demo": it parses args (the flags after "demo"), runs
// the scenarios, prints the report on stdout and progress on stderr, and
// returns the exit status (internal/exitcode): 0 all PASS, 1 a FAIL, 2
// could not run, 130 interrupted. "fencelock demo" and cmd/etcddemo
// share it, so that both take the same flags.
func Main(args []string, stdout, stderr io.Writer, opts MainOptions) int {
	fs := flag.NewFlagSet("fencelock demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The flag package reports a bad flag on stderr; runDemo adds a pointer
	// to -h, which prints the full text on stdout.
	fs.Usage = func() {}
	f := defineDemoFlags(fs, cmp.Or(opts.DefaultBackend, BackendRedis))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, demoUsage, backendListText(), scenarioListText())
			printFlags(stdout, fs)
			return 0
		}
		fmt.Fprintln(stderr, `Run "fencelock demo -h" for usage.`)
		return 2 // the flag package printed the error
	}
	// From the environment only after parsing, so that -h never prints a
	// URL (which may hold a password).
	if *f.redisURL == "" {
		*f.redisURL = os.Getenv("REDIS_URL")
	}
	if *f.pgURL == "" {
		*f.pgURL = os.Getenv("DATABASE_URL")
	}
	scenarios, lockBackend, etcd, err := f.check(fs, opts)
	switch {
	case etcd:
		return runEtcdDemo(args, stderr)
	case err != nil:
		fmt.Fprintf(stderr, "fencelock demo: %s\n", err)
		fmt.Fprintln(stderr, `Run "fencelock demo -h" for usage.`)
		return 2
	}

	if !*f.verbose {
		QuietRedisLog()
	}
	if len(opts.WorkerCommand) == 0 {
		fmt.Fprintln(stderr, "fencelock demo: no worker command (MainOptions.WorkerCommand)")
		return exitcode.CouldNotRun
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, Config{
		Scenarios:     scenarios,
		Workers:       *f.workers,
		Iterations:    *f.iterations,
		RedisURL:      *f.redisURL,
		Store:         *f.store,
		PostgresURL:   *f.pgURL,
		WorkerCommand: opts.WorkerCommand,
		Backend:       lockBackend,
		Progress:      stderr,
		ProgressTTY:   isTerminal(stderr),
		Verbose:       *f.verbose,

		Failovers:         *f.failovers,
		ReplicaAck:        *f.replicaAck,
		ReplicaAckTimeout: *f.ackTimeout,
	})
	if rep != nil {
		if werr := writeReport(rep, stdout, *f.jsonOut); werr != nil {
			fmt.Fprintln(stderr, exitcode.Message("fencelock demo", werr))
			return exitcode.CouldNotRun
		}
	}
	return demoStatus(ctx, rep, err, stderr)
}

// scenarioListText lists the scenarios for -h, each with its length.
func scenarioListText() string {
	var b strings.Builder
	for _, s := range Scenarios {
		n := fmt.Sprint(s.Iterations)
		switch {
		case s.Failovers > 0:
			n = fmt.Sprintf("%d failovers", s.Failovers)
		case s.Fair:
			n = fmt.Sprintf("%v per mode", FairRunFor)
		case s.Prim != "":
			n = s.PrimLength()
		}
		fmt.Fprintf(&b, "  %-16s [%s] %s\n", s.Name, n, s.Summary)
	}
	fmt.Fprintf(&b, "  %-16s runs them all in turn (two to three minutes with the defaults)\n", "all")
	return b.String()
}

// backendListText lists the backends for -h.
func backendListText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-16s %s\n", BackendRedis, "the demo's own redis-server (default; a Sentinel group or Cluster in the failover scenarios)")
	fmt.Fprintf(&b, "  %-16s %s\n", BackendRedlock, "a majority of --masters (3 or 5) independent redis-servers (package redlock)")
	fmt.Fprintf(&b, "  %-16s %s\n", BackendEtcd, "a 3-member etcd cluster (etcdbackend, a module of its own)")
	return b.String()
}

// demoFlags are the demo's flags, once defined on a flag set.
type demoFlags struct {
	scenario, redisURL, store, pgURL, backend           *string
	workers, iterations, failovers, replicaAck, masters *int
	ackTimeout                                          *time.Duration
	jsonOut, verbose                                    *bool
}

// defineDemoFlags defines the demo's flags on fs.
func defineDemoFlags(fs *flag.FlagSet, defBackend string) *demoFlags {
	return &demoFlags{
		scenario:   fs.String("scenario", "all", "scenario to run: "+strings.Join(Names(), ", ")+", or all (a comma-separated list works too)"),
		workers:    fs.Int("workers", 8, "worker processes, 2 to 64"),
		iterations: fs.Int("iterations", 0, "iterations per worker (default: each scenario's own, see above; the failover scenarios iterate until their failovers are done)"),
		redisURL:   fs.String("redis", "", "Redis URL or host:port to use instead of a private redis-server (default $REDIS_URL)"),
		store:      fs.String("store", StoreRedis, "fenced store: "+strings.Join(StoreKinds, ", ")+" (restart and the failover scenarios use sqlite instead of redis)"),
		failovers:  fs.Int("failovers", 0, "failovers in failover and cluster-failover (default: each one's own, see above)"),
		replicaAck: fs.Int("replica-ack", 0, fmt.Sprintf("failover scenarios only: replicas that must acknowledge each acquire and renewal (redisbackend.WithReplicaAck), 0 (off) to %d; the Cluster has 1 replica per master", MaxReplicaAck)),
		ackTimeout: fs.Duration("replica-ack-timeout", DefaultReplicaAckTimeout, "how long an acquire or renewal waits for --replica-ack acknowledgements"),
		pgURL:      fs.String("postgres-url", "", "PostgreSQL URL for --store postgres (default $DATABASE_URL; without either, a private server is started)"),
		jsonOut:    fs.Bool("json", false, "print the report as JSON instead of a table"),
		verbose:    fs.Bool("verbose", false, "show the workers' logs (lock losses, renewal failures) and go-redis's"),
		backend:    fs.String("backend", defBackend, "where the lock lives: "+BackendRedis+", "+BackendRedlock+" or "+BackendEtcd+" (see above)"),
		masters:    fs.Int("masters", DefaultRedlockMasters, "--backend redlock: independent masters, 3 or 5"),
	}
}

// check validates the parsed flags, in the order a user reads them, and
// returns the scenarios to run and the lock's backend (nil: the demo's own
// redis-server); etcd is true when --backend etcd must be handed to the
// etcd demo, which this program does not have.
func (f *demoFlags) check(fs *flag.FlagSet, opts MainOptions) (scenarios []Scenario, lockBackend *Backend, etcd bool, err error) {
	if fs.NArg() > 0 {
		return nil, nil, false, fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	scenarios, err = ParseScenarios(*f.scenario)
	if err != nil {
		return nil, nil, false, err
	}
	if *f.workers < 2 || *f.workers > 64 {
		return nil, nil, false, fmt.Errorf("invalid --workers %d: want 2 to 64 (they contend for one lock)", *f.workers)
	}
	lockBackend, etcd, err = f.lockBackend(opts)
	if etcd || err != nil {
		return nil, nil, etcd, err
	}
	if *f.backend != BackendRedlock && isSet(fs, "masters") {
		return nil, nil, false, fmt.Errorf("--masters applies only to --backend %s", BackendRedlock)
	}
	if err := f.checkRanges(); err != nil {
		return nil, nil, false, err
	}
	if err := f.checkFailoverFlags(fs, scenarios); err != nil {
		return nil, nil, false, err
	}
	return scenarios, lockBackend, false, nil
}

// lockBackend returns the backend --backend names (nil: the demo's own
// redis-server), or etcd true when it is etcd and opts has none.
func (f *demoFlags) lockBackend(opts MainOptions) (*Backend, bool, error) {
	switch *f.backend {
	case BackendRedis:
		return nil, false, nil
	case BackendRedlock:
		if *f.masters != 3 && *f.masters != 5 {
			return nil, false, fmt.Errorf("invalid --masters %d: want 3 or 5 (an odd number of independent masters)", *f.masters)
		}
		return RedlockBackend(*f.masters), false, nil
	}
	b := lookupBackend(*f.backend, opts.Backends)
	if b == nil && *f.backend == BackendEtcd {
		return nil, true, nil
	}
	if b == nil {
		return nil, false, fmt.Errorf("invalid --backend %q: want %s, %s or %s", *f.backend, BackendRedis, BackendRedlock, BackendEtcd)
	}
	return b, false, nil
}

// checkRanges checks the numeric flags and --store.
func (f *demoFlags) checkRanges() error {
	if *f.iterations < 0 || *f.iterations > 10000 {
		return fmt.Errorf("invalid --iterations %d: want 1 to 10000 (or 0 for each scenario's default)", *f.iterations)
	}
	switch *f.store {
	case StoreRedis, StoreSQLite, StorePostgres:
	default:
		return fmt.Errorf("invalid --store %q: want %s", *f.store, strings.Join(StoreKinds, ", "))
	}
	if *f.failovers < 0 || *f.failovers > MaxFailovers {
		return fmt.Errorf("invalid --failovers %d: want 1 to %d (or 0 for each scenario's default)", *f.failovers, MaxFailovers)
	}
	if *f.replicaAck < 0 || *f.replicaAck > MaxReplicaAck {
		return fmt.Errorf("invalid --replica-ack %d: want 0 (off) to %d (the Sentinel group has 2 replicas, the Cluster 1 per master)", *f.replicaAck, MaxReplicaAck)
	}
	if *f.ackTimeout < time.Millisecond || *f.ackTimeout > MaxReplicaAckTimeout {
		return fmt.Errorf("invalid --replica-ack-timeout %v: want 1ms to %v", *f.ackTimeout, MaxReplicaAckTimeout)
	}
	return nil
}

// checkFailoverFlags refuses the failover flags when no failover scenario
// runs: they mean nothing to the others (their Redis has no replicas), and
// ignoring them would mislead.
func (f *demoFlags) checkFailoverFlags(fs *flag.FlagSet, scenarios []Scenario) error {
	if slices.ContainsFunc(scenarios, func(s Scenario) bool { return s.Failovers > 0 }) {
		return nil
	}
	var set []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "failovers", "replica-ack", "replica-ack-timeout":
			set = append(set, "--"+f.Name)
		}
	})
	if len(set) == 0 {
		return nil
	}
	verb := "applies"
	if len(set) > 1 {
		verb = "apply"
	}
	return fmt.Errorf("%s %s only to the failover scenarios (failover, cluster-failover), and --scenario %q has none", strings.Join(set, ", "), verb, *f.scenario)
}

// writeReport prints the report on stdout, as JSON or as a table.
func writeReport(rep *Report, stdout io.Writer, jsonOut bool) error {
	if jsonOut {
		return rep.WriteJSON(stdout)
	}
	fmt.Fprintln(stdout)
	return rep.WriteTable(stdout)
}

// demoStatus returns the exit status of a run that ended with err (ctx:
// the run's, ended by an interrupt).
func demoStatus(ctx context.Context, rep *Report, err error, stderr io.Writer) int {
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "fencelock demo: interrupted")
		return exitcode.Interrupted
	case err != nil:
		// No verdict: the demo could not run (or finish) its scenarios.
		fmt.Fprintln(stderr, exitcode.Message("fencelock demo", err))
		return exitcode.CouldNotRun
	case !rep.Pass:
		return exitcode.Fail
	}
	return exitcode.OK
}

// etcdDemoDir is the etcd demo's main package, relative to the root of a
// checkout (whose go.work puts the cmd and etcdbackend modules together).
const etcdDemoDir = "cmd/etcddemo"

// etcdDemoCommand is what to run by hand, from a checkout's root.
const etcdDemoCommand = "go run ./cmd/etcddemo"

// runEtcdDemo runs "--backend etcd" for a program that has no etcd in it
// (the fencelock command: etcd's client stays out of it, so that
// Redis-only users never build it). From a checkout it builds
// cmd/etcddemo, which has the etcd backend and the same
// flags, and runs it with args; otherwise it says what to run.
func runEtcdDemo(args []string, stderr io.Writer) int {
	root, ok := checkoutRoot()
	if !ok {
		fmt.Fprintf(stderr, "fencelock demo: --backend etcd runs from a checkout of github.com/fencelock/fencelock (the etcd backend is a module of its own, so that Redis users do not download etcd): in the checkout, run: %s %s\n",
			etcdDemoCommand, strings.Join(args, " "))
		return exitcode.CouldNotRun
	}
	dir, err := os.MkdirTemp("", "fencelock-etcddemo-")
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("fencelock demo", err))
		return exitcode.CouldNotRun
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "etcddemo")
	fmt.Fprintf(stderr, "fencelock demo: --backend etcd: building %s ...\n", etcdDemoDir)
	build := exec.Command("go", "build", "-o", bin, "./"+etcdDemoDir)
	build.Dir = root
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(stderr, "fencelock demo: building the etcd demo failed (%v); to run it by hand: %s %s\n", err, etcdDemoCommand, strings.Join(args, " "))
		return exitcode.CouldNotRun
	}
	// The child gets Ctrl-C too (same process group) and stops its
	// workers; this process only waits for it and passes its status on.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	defer signal.Reset(os.Interrupt, syscall.SIGTERM)
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return exitcode.OK
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	case errors.As(err, &exit):
		return exitcode.Interrupted // killed by a signal
	}
	fmt.Fprintln(stderr, exitcode.Message("fencelock demo", err))
	return exitcode.CouldNotRun
}

// checkoutRoot finds the root of a checkout of github.com/fencelock/
// fencelock with the etcd demo in it, from the working directory up.
func checkoutRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && slices.Contains(strings.Fields(firstLine(string(mod))), "github.com/fencelock/fencelock") {
			_, err := os.Stat(filepath.Join(dir, etcdDemoDir, "main.go"))
			return dir, err == nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// printFlags lists fs's flags as every fencelock command does.
func printFlags(w io.Writer, fs *flag.FlagSet) { cliflags.Print(w, fs) }

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
