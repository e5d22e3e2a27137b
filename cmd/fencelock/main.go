// Command fencelock is fencelock's command-line tool.
//
//	fencelock demo [flags]          multi-process demo: mutex, expiry, renew, pause, crash, restart, fair, semaphore, rwlock, election, jobs, failover, cluster-failover
//	fencelock ls [flags]            the locks held in a namespace: key, token, owner, identity, fence, ttl, holds, waiters
//	fencelock inspect KEY [flags]   a lock's state in Redis: holder, fence, lease left, waiters
//	fencelock unlock --yes KEY      free a stuck lock, logged (alias: force-release)
//	fencelock watch [flags]         ls, live
//	fencelock version               module, Go and commit versions
//	fencelock dashboard [flags]     a live web page of a namespace's locks
//
// Run "fencelock help" for the list of commands and "fencelock demo -h" for
// the demo's flags. The demo is described in package internal/demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/internal/demo"
	"github.com/fencelock/fencelock/internal/exitcode"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is a subcommand.
type command struct {
	name    string
	summary string
	hidden  bool
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands.
func commands() []command {
	return []command{
		{name: "demo", summary: "run worker processes against one lock: mutex, expiry, renew, pause, crash, restart, fair lock, primitives, failovers", run: runDemo},
		{name: "ls", summary: "list the locks held in a namespace: holder token, identity, fence, ttl, waiters", run: runLs},
		{name: "inspect", summary: "show a lock's state in Redis: holder, fence, lease left, waiters", run: runInspect},
		{name: "unlock", summary: "free a lock whoever holds it (--yes), logged with who did it (operators)", run: runUnlock},
		{name: "force-release", hidden: true, run: runForceRelease}, // unlock's former name
		{name: "watch", summary: "list the locks held in a namespace, live, until interrupted", run: runWatch},
		{name: "version", summary: "print the fencelock module's version, the Go version and the commit", run: runVersion},
		{name: "dashboard", summary: "serve a live web page of a namespace's locks: holders, fences, TTLs, hand-offs", run: runDashboard},
		{name: "demo-worker", hidden: true, run: func([]string, io.Writer, io.Writer) int { return demo.WorkerMain() }},
		{name: "help", summary: "show help for a command", run: runHelp},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `fencelock: a distributed lock for Go on Redis, with fencing tokens.

Usage:
  fencelock <command> [flags]

Commands:
`)
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, `
Run "fencelock <command> -h" for a command's flags.
`)
}

// run is main without os.Exit: it returns the exit status, the convention
// of every fencelock command (internal/exitcode): 0 ok, 1 a check failed
// (a demo scenario's FAIL), 2 could not run (bad usage, Redis unreachable,
// a refused argument), 130 interrupted.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "fencelock: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] && !c.hidden && c.name != "help" {
			return c.run([]string{"-h"}, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "fencelock help: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

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
line stalls until their places lapse (fencelock.FairPlaceLease), no longer.
--iterations does not apply to it.

In semaphore, rwlock, election and jobs, issue 10's primitives run in worker
processes of their own (whatever --workers says): a 3-permit
Client.Semaphore (4 processes x 3 goroutines; a permit holder is kill
-9ed), a Client.RWLock (4 x (1 writer + 3 readers)), Campaign and Resign
watched by Observe (4 candidates; the leader is kill -9ed), and RunJob
every second in 3 processes beside the plain TryAcquire pattern
(--iterations sets the ticks). Holders count themselves in on the server
and their intervals are swept: FAIL on more holders than the rule allows,
a fence regression, a stale write accepted, a tick RunJob ran twice, or a
kill never recovered from; rates, waits and hand-overs are figures.

Scenarios (default iterations per worker, or failovers, in brackets):
%s
Flags:
`

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencelock demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var scenarioList strings.Builder
	for _, s := range demo.Scenarios {
		n := fmt.Sprint(s.Iterations)
		switch {
		case s.Failovers > 0:
			n = fmt.Sprintf("%d failovers", s.Failovers)
		case s.Fair:
			n = fmt.Sprintf("%v per mode", demo.FairRunFor)
		case s.Prim != "":
			n = s.PrimLength()
		}
		fmt.Fprintf(&scenarioList, "  %-16s [%s] %s\n", s.Name, n, s.Summary)
	}
	fmt.Fprintf(&scenarioList, "  %-16s runs them all in turn (two to three minutes with the defaults)\n", "all")
	// The flag package reports a bad flag on stderr; runDemo adds a pointer
	// to -h, which prints the full text on stdout.
	fs.Usage = func() {}
	var (
		scenario   = fs.String("scenario", "all", "scenario to run: "+strings.Join(demo.Names(), ", ")+", or all (a comma-separated list works too)")
		workers    = fs.Int("workers", 8, "worker processes, 2 to 64")
		iterations = fs.Int("iterations", 0, "iterations per worker (default: each scenario's own, see above; the failover scenarios iterate until their failovers are done)")
		redisURL   = fs.String("redis", "", "Redis URL or host:port to use instead of a private redis-server (default $REDIS_URL)")
		store      = fs.String("store", demo.StoreRedis, "fenced store: "+strings.Join(demo.StoreKinds, ", ")+" (restart and the failover scenarios use sqlite instead of redis)")
		failovers  = fs.Int("failovers", 0, "failovers in failover and cluster-failover (default: each one's own, see above)")
		replicaAck = fs.Int("replica-ack", 0, fmt.Sprintf("failover scenarios only: replicas that must acknowledge each acquire and renewal (redisbackend.WithReplicaAck), 0 (off) to %d; the Cluster has 1 replica per master", demo.MaxReplicaAck))
		ackTimeout = fs.Duration("replica-ack-timeout", demo.DefaultReplicaAckTimeout, "how long an acquire or renewal waits for --replica-ack acknowledgements")
		pgURL      = fs.String("postgres-url", "", "PostgreSQL URL for --store postgres (default $DATABASE_URL; without either, a private server is started)")
		jsonOut    = fs.Bool("json", false, "print the report as JSON instead of a table")
		verbose    = fs.Bool("verbose", false, "show the workers' logs (lock losses, renewal failures) and go-redis's")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, demoUsage, scenarioList.String())
			printFlags(stdout, fs)
			return 0
		}
		fmt.Fprintln(stderr, `Run "fencelock demo -h" for usage.`)
		return 2 // the flag package printed the error
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fencelock demo: "+format+"\n", a...)
		fmt.Fprintln(stderr, `Run "fencelock demo -h" for usage.`)
		return 2
	}
	// From the environment only after parsing, so that -h never prints a
	// URL (which may hold a password).
	if *redisURL == "" {
		*redisURL = os.Getenv("REDIS_URL")
	}
	if *pgURL == "" {
		*pgURL = os.Getenv("DATABASE_URL")
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q (flags only)", fs.Arg(0))
	}
	scenarios, err := demo.ParseScenarios(*scenario)
	if err != nil {
		return bad("%v", err)
	}
	if *workers < 2 || *workers > 64 {
		return bad("invalid --workers %d: want 2 to 64 (they contend for one lock)", *workers)
	}
	if *iterations < 0 || *iterations > 10000 {
		return bad("invalid --iterations %d: want 1 to 10000 (or 0 for each scenario's default)", *iterations)
	}
	switch *store {
	case demo.StoreRedis, demo.StoreSQLite, demo.StorePostgres:
	default:
		return bad("invalid --store %q: want %s", *store, strings.Join(demo.StoreKinds, ", "))
	}
	if *failovers < 0 || *failovers > demo.MaxFailovers {
		return bad("invalid --failovers %d: want 1 to %d (or 0 for each scenario's default)", *failovers, demo.MaxFailovers)
	}
	if *replicaAck < 0 || *replicaAck > demo.MaxReplicaAck {
		return bad("invalid --replica-ack %d: want 0 (off) to %d (the Sentinel group has 2 replicas, the Cluster 1 per master)", *replicaAck, demo.MaxReplicaAck)
	}
	if *ackTimeout < time.Millisecond || *ackTimeout > demo.MaxReplicaAckTimeout {
		return bad("invalid --replica-ack-timeout %v: want 1ms to %v", *ackTimeout, demo.MaxReplicaAckTimeout)
	}
	// The failover flags mean nothing to the other scenarios (their Redis
	// has no replicas): refuse them rather than ignore them.
	if !slices.ContainsFunc(scenarios, func(s demo.Scenario) bool { return s.Failovers > 0 }) {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "failovers", "replica-ack", "replica-ack-timeout":
				set = append(set, "--"+f.Name)
			}
		})
		if len(set) > 0 {
			verb := "applies"
			if len(set) > 1 {
				verb = "apply"
			}
			return bad("%s %s only to the failover scenarios (failover, cluster-failover), and --scenario %q has none", strings.Join(set, ", "), verb, *scenario)
		}
	}

	if !*verbose {
		demo.QuietRedisLog()
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, exitcode.Message("fencelock demo", fmt.Errorf("cannot find this program to start workers: %w", err)))
		return exitcode.CouldNotRun
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := demo.Run(ctx, demo.Config{
		Scenarios:     scenarios,
		Workers:       *workers,
		Iterations:    *iterations,
		RedisURL:      *redisURL,
		Store:         *store,
		PostgresURL:   *pgURL,
		WorkerCommand: []string{self, "demo-worker"},
		Progress:      stderr,
		ProgressTTY:   isTerminal(stderr),
		Verbose:       *verbose,

		Failovers:         *failovers,
		ReplicaAck:        *replicaAck,
		ReplicaAckTimeout: *ackTimeout,
	})
	if rep != nil {
		var werr error
		if *jsonOut {
			werr = rep.WriteJSON(stdout)
		} else {
			fmt.Fprintln(stdout)
			werr = rep.WriteTable(stdout)
		}
		if werr != nil {
			fmt.Fprintln(stderr, exitcode.Message("fencelock demo", werr))
			return exitcode.CouldNotRun
		}
	}
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

// printFlags lists fs's flags with GNU-style double dashes (the flag
// package accepts both).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n      %s", line, usage)
		switch {
		case f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false":
		case name == "string":
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
