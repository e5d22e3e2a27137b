// Command fencelock is fencelock's command-line tool.
//
//	fencelock demo [flags]          multi-process demo: mutex, expiry, renew, pause, crash, restart
//	fencelock inspect [flags] KEY   a lock's state in Redis: holder, fence, lease left, waiters
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
	"strings"
	"syscall"

	"github.com/fencelock/fencelock/internal/demo"
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
		{name: "demo", summary: "run worker processes against one lock: mutex, expiry, renew, pause, crash, restart", run: runDemo},
		{name: "inspect", summary: "show a lock's state in Redis: holder, fence, lease left, waiters", run: runInspect},
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
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, `
Run "fencelock <command> -h" for a command's flags.
`)
}

// run is main without os.Exit: it returns the exit status (0 ok, 1 failure,
// 2 bad usage, 130 interrupted).
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
fences, hand-off latency, and PASS/FAIL per scenario. Exit status 1 on any
FAIL.

Without --redis (or $REDIS_URL) it starts a private redis-server on a free
port. With one, it uses keys under fencelock-demo:* and deletes them after;
the restart scenario is then skipped.

Scenarios (default iterations per worker in brackets):
%s
Flags:
`

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencelock demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var scenarioList strings.Builder
	for _, s := range demo.Scenarios {
		fmt.Fprintf(&scenarioList, "  %-8s [%d] %s\n", s.Name, s.Iterations, s.Summary)
	}
	fmt.Fprintf(&scenarioList, "  %-8s runs them all in turn (about a minute with the defaults)\n", "all")
	// The flag package reports a bad flag on stderr; runDemo adds a pointer
	// to -h, which prints the full text on stdout.
	fs.Usage = func() {}
	var (
		scenario   = fs.String("scenario", "all", "scenario to run: "+strings.Join(demo.Names(), ", ")+", or all (a comma-separated list works too)")
		workers    = fs.Int("workers", 8, "worker processes, 2 to 64")
		iterations = fs.Int("iterations", 0, "iterations per worker (default: each scenario's own, see above)")
		redisURL   = fs.String("redis", "", "Redis URL or host:port to use instead of a private redis-server (default $REDIS_URL)")
		store      = fs.String("store", demo.StoreRedis, "fenced store: "+strings.Join(demo.StoreKinds, ", ")+" (restart always uses sqlite instead of redis)")
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

	if !*verbose {
		demo.QuietRedisLog()
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "fencelock demo: cannot find this program to start workers: %v\n", err)
		return 1
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
			fmt.Fprintf(stderr, "fencelock demo: %v\n", werr)
			return 1
		}
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "fencelock demo: interrupted")
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "fencelock demo: %v\n", err)
		return 1
	case !rep.Pass:
		return 1
	}
	return 0
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
